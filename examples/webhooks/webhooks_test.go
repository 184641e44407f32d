// Package webhooks_test runs each example configuration in this folder with the
// built idemproxy binary over real sockets, and sends it deliveries signed as
// each provider documents: a valid one is forwarded once, a redelivery gets the
// stored answer, a tampered body, a stale timestamp or a forged pre-claim gets
// 401 and reaches nothing.
package webhooks_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// start runs idemproxy with an example config, its upstream and ports replaced
// by flags (which override the file), and env for the secrets; it returns the
// address it serves on.
func start(t *testing.T, config string, up *testutil.Upstream, env ...string) string {
	t.Helper()
	return testutil.StartIdemproxy(t, binary(t), []string{"--config", config, "--upstream", up.URL}, env...).Addr
}

// binary is idemproxy, built once for the package.
func binary(t *testing.T) string {
	t.Helper()
	return testutil.Build(t, "../../cmd/idemproxy")
}

type answer = testutil.Response

func deliver(t *testing.T, addr, path, body string, headers map[string]string) answer {
	t.Helper()
	return testutil.Send(t, addr, testutil.Delivery(path, body, headers))
}

// The scenarios every preset passes: first → forwarded, again → replayed, bad →
// 401 and not forwarded.
type scenario struct {
	first, again answer
	bad          map[string]answer
}

func check(t *testing.T, up *testutil.Upstream, s scenario, wantForwarded int) {
	t.Helper()
	if s.first.Status != 200 || s.first.Replayed || s.first.Body != "processed #1" {
		t.Errorf("first delivery: %+v", s.first)
	}
	if s.again.Status != 200 || !s.again.Replayed || s.again.Body != s.first.Body {
		t.Errorf("redelivery: %+v, want the first answer replayed", s.again)
	}
	for name, a := range s.bad {
		if a.Status != 401 || !strings.Contains(a.Body, "urn:idemproxy:problem:invalid-signature") {
			t.Errorf("%s: %+v, want 401 invalid-signature", name, a)
		}
	}
	if n := up.Count("POST"); n != wantForwarded {
		t.Errorf("the upstream got %d deliveries, want %d", n, wantForwarded)
	}
}

func TestStandardWebhooks(t *testing.T) {
	up := testutil.NewDeliveries(t)
	secret := webhooktest.StandardSecret
	addr := start(t, "standard.yaml", up, "STANDARD_WEBHOOK_SECRET="+secret)
	const path = "/webhooks/standard"
	body, now := `{"type":"invoice.paid","data":{"id":"in_1"}}`, time.Now()
	var s scenario
	s.first = deliver(t, addr, path, body, webhooktest.Standard(secret, "msg_1", now, body))
	// A retry: the same id, a fresh timestamp and signature.
	s.again = deliver(t, addr, path, body, webhooktest.Standard(secret, "msg_1", now.Add(30*time.Second), body))
	forged := webhooktest.Standard(secret, "msg_1", now, body)
	forged["webhook-id"] = "msg_future" // the id is signed: changing it breaks the signature
	s.bad = map[string]answer{
		"tampered body":            deliver(t, addr, path, strings.Replace(body, "in_1", "in_2", 1), webhooktest.Standard(secret, "msg_2", now, body)),
		"timestamp 10 minutes old": deliver(t, addr, path, body, webhooktest.Standard(secret, "msg_3", now.Add(-10*time.Minute), body)),
		"pre-claim, forged id":     deliver(t, addr, path, `{"evil":true}`, forged),
		"unsigned":                 deliver(t, addr, path, body, map[string]string{"webhook-id": "msg_future", "webhook-timestamp": fmt.Sprint(now.Unix())}),
	}
	check(t, up, s, 1)
	// The id the forger tried to take still runs when the real delivery comes.
	if a := deliver(t, addr, path, body, webhooktest.Standard(secret, "msg_future", now, body)); a.Status != 200 || a.Replayed {
		t.Fatalf("the real msg_future: %+v", a)
	}
}

func TestStripe(t *testing.T) {
	up := testutil.NewDeliveries(t)
	const secret, path = "whsec_test_stripe_endpoint", "/webhooks/stripe"
	addr := start(t, "stripe.yaml", up, "STRIPE_WEBHOOK_SECRET="+secret)
	now := time.Now()
	event := func(id string, pending int) string {
		return fmt.Sprintf(`{"id":%q,"object":"event","type":"payment_intent.succeeded","pending_webhooks":%d}`, id, pending)
	}
	var s scenario
	s.first = deliver(t, addr, path, event("evt_1", 1), webhooktest.Stripe(secret, now, event("evt_1", 1)))
	// Stripe's retry an hour later: a new signature time, the body rendered anew.
	s.again = deliver(t, addr, path, event("evt_1", 2), webhooktest.Stripe(secret, now, event("evt_1", 2)))
	s.bad = map[string]answer{
		"tampered body":           deliver(t, addr, path, event("evt_1", 9), webhooktest.Stripe(secret, now, event("evt_1", 1))),
		"timestamp 6 min old":     deliver(t, addr, path, event("evt_2", 1), webhooktest.Stripe(secret, now.Add(-6*time.Minute), event("evt_2", 1))),
		"pre-claim, wrong secret": deliver(t, addr, path, event("evt_future", 1), webhooktest.Stripe("whsec_guessed", now, event("evt_future", 1))),
	}
	check(t, up, s, 1)
	if a := deliver(t, addr, path, event("evt_future", 1), webhooktest.Stripe(secret, now, event("evt_future", 1))); a.Status != 200 || a.Replayed {
		t.Fatalf("the real evt_future: %+v", a)
	}
	// A signed event without an id: require_key makes it 400, not forwarded.
	if a := deliver(t, addr, path, `{"object":"event"}`, webhooktest.Stripe(secret, now, `{"object":"event"}`)); a.Status != 400 || !strings.Contains(a.Body, "missing-key") {
		t.Fatalf("no id: %+v", a)
	}
	if n := up.Count("POST"); n != 2 {
		t.Fatalf("forwarded %d, want 2", n)
	}
}

func TestGitHub(t *testing.T) {
	up := testutil.NewDeliveries(t)
	const secret, path = "gh webhook secret", "/webhooks/github"
	addr := start(t, "github.yaml", up, "GITHUB_WEBHOOK_SECRET="+secret)
	body := `{"action":"opened","pull_request":{"number":7}}`
	var s scenario
	s.first = deliver(t, addr, path, body, webhooktest.GitHub(secret, "72d3162e-cc78-11e3-81ab-4c9367dc0958", body))
	s.again = deliver(t, addr, path, body, webhooktest.GitHub(secret, "72d3162e-cc78-11e3-81ab-4c9367dc0958", body))
	// A captured delivery sent again under a new delivery id: the same signed
	// body, so the same key: replayed, not run.
	if a := deliver(t, addr, path, body, webhooktest.GitHub(secret, "ffffffff-0000-0000-0000-000000000000", body)); !a.Replayed || a.Body != s.first.Body {
		t.Errorf("captured body under a new id: %+v", a)
	}
	s.bad = map[string]answer{
		"tampered body":   deliver(t, addr, path, strings.Replace(body, "7", "8", 1), webhooktest.GitHub(secret, "d-2", body)),
		"forged":          deliver(t, addr, path, `{"action":"deleted"}`, webhooktest.GitHub("guess", "d-3", `{"action":"deleted"}`)),
		"sha1 only (old)": deliver(t, addr, path, body, map[string]string{"X-Hub-Signature": "sha1=0000"}),
	}
	check(t, up, s, 1)
	// The published example: GitHub's documented secret, body and signature.
	up2 := testutil.NewDeliveries(t)
	addr2 := start(t, "github.yaml", up2, "GITHUB_WEBHOOK_SECRET="+webhooktest.GitHubSecret)
	if a := deliver(t, addr2, path, webhooktest.GitHubBody, map[string]string{"X-Hub-Signature-256": webhooktest.GitHubSignature}); a.Status != 200 {
		t.Fatalf("GitHub's documented example: %+v", a)
	}
}

func TestGenericHMAC(t *testing.T) {
	// The example reads its secrets from a file: point it at one of ours (two
	// secrets, as while rotating) through a copy of the config.
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	os.WriteFile(secrets, []byte("old-secret\nnew-secret\n"), 0o600)
	src, err := os.ReadFile("hmac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "hmac.yaml")
	os.WriteFile(config, []byte(strings.Replace(string(src), "/etc/idemproxy/acme-webhook-secrets", secrets, 1)), 0o600)
	up := testutil.NewDeliveries(t)
	addr := start(t, config, up)
	const path = "/webhooks/acme"
	body := `{"event":{"id":"ev_1","kind":"order.paid"}}`
	var s scenario
	s.first = deliver(t, addr, path, body, webhooktest.HMAC("old-secret", "X-Signature", "sha256=", false, body))
	s.again = deliver(t, addr, path, body, webhooktest.HMAC("new-secret", "X-Signature", "sha256=", false, body))
	s.bad = map[string]answer{
		"tampered body": deliver(t, addr, path, strings.Replace(body, "ev_1", "ev_2", 1), webhooktest.HMAC("new-secret", "X-Signature", "sha256=", false, body)),
		"forged":        deliver(t, addr, path, `{"event":{"id":"ev_9"}}`, webhooktest.HMAC("guess", "X-Signature", "sha256=", false, `{"event":{"id":"ev_9"}}`)),
		"no prefix":     deliver(t, addr, path, body, webhooktest.HMAC("new-secret", "X-Signature", "", false, body)),
	}
	check(t, up, s, 1)
}

// A config whose secret is missing does not start: one line naming the setting,
// exit 2, and never the value of another secret.
func TestMissingSecretStopsStartUp(t *testing.T) {
	code, out := testutil.Run(t, binary(t), []string{"--config", "stripe.yaml", "--listen", "127.0.0.1:0"})
	if code != 2 || !strings.Contains(out, "routes[0] (/webhooks/stripe): webhook_secrets: env:STRIPE_WEBHOOK_SECRET: the variable is not set or empty") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// idemproxy sign prints headers the route accepts.
func TestSignCommand(t *testing.T) {
	up := testutil.NewDeliveries(t)
	const secret = "whsec_c2lnbi1jb21tYW5k"
	addr := start(t, "standard.yaml", up, "STANDARD_WEBHOOK_SECRET="+secret)
	body := `{"type":"ping"}`
	cmd := exec.Command(binary(t), "sign", "--webhook", "standard", "--secret", "env:SIGN_SECRET", "--id", "msg_sign", "--body", body)
	cmd.Env = append(os.Environ(), "SIGN_SECRET="+secret)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	headers := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, value, _ := strings.Cut(line, ": ")
		headers[name] = value
	}
	for i := 0; i < 2; i++ {
		if a := deliver(t, addr, "/webhooks/standard", body, headers); a.Status != 200 || a.Replayed != (i > 0) {
			t.Fatalf("signed by idemproxy sign, delivery %d: %+v (headers %v)", i, a, headers)
		}
	}
	if code := exec.Command(binary(t), "sign", "--webhook", "standard").Run(); code == nil {
		t.Fatal("sign without a secret exited 0")
	}
}

// The other example configurations that use webhooks start with their secrets set.
func TestOtherExampleConfigsLoad(t *testing.T) {
	up := testutil.NewDeliveries(t)
	start(t, "../idemproxy.yaml", up, "GITHUB_WEBHOOK_SECRET=x", "STANDARD_WEBHOOK_SECRET="+webhooktest.StandardSecret)
	start(t, "../demo.yaml", up, "DEMO_WEBHOOK_SECRET="+webhooktest.StandardSecret)
}
