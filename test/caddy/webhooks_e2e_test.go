package caddy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

// examples/webhooks/Caddyfile inside real Caddy: each preset forwards a signed
// delivery once, replays its redelivery, and answers a tampered or forged one 401
// without forwarding it.
func TestCaddyWebhookExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewDeliveries(t)
	dir := t.TempDir()
	secrets := filepath.Join(dir, "acme")
	os.WriteFile(secrets, []byte("acme-secret\n"), 0o600)
	for k, v := range map[string]string{
		"WEBHOOKS_SITE": ":0", "WEBHOOKS_ADMIN": adminAddress(dir),
		"WEBHOOKS_UPSTREAM":       strings.TrimPrefix(up.URL, "http://"),
		"STANDARD_WEBHOOK_SECRET": webhooktest.StandardSecret, "STRIPE_WEBHOOK_SECRET": "whsec_stripe",
		"GITHUB_WEBHOOK_SECRET": "gh", "ACME_WEBHOOK_SECRETS_FILE": secrets,
	} {
		t.Setenv(k, v)
	}
	p := runCaddy(t, caddyBinary(t), dir, "../../examples/webhooks/Caddyfile")

	post := func(path, body string, h map[string]string) (int, string, bool) {
		t.Helper()
		a := p.Send(t, testutil.Delivery(path, body, h))
		return a.Status, a.Body, a.Replayed
	}
	now := time.Now()
	cases := []struct {
		path, body         string
		good, again, wrong map[string]string
	}{
		{"/webhooks/standard", `{"type":"a"}`,
			webhooktest.Standard(webhooktest.StandardSecret, "msg_1", now, `{"type":"a"}`),
			webhooktest.Standard(webhooktest.StandardSecret, "msg_1", now.Add(time.Minute), `{"type":"a"}`),
			webhooktest.Standard("whsec_Z3Vlc3M=", "msg_2", now, `{"type":"a"}`)},
		{"/webhooks/stripe", `{"id":"evt_1"}`,
			webhooktest.Stripe("whsec_stripe", now, `{"id":"evt_1"}`),
			webhooktest.Stripe("whsec_stripe", now.Add(time.Minute), `{"id":"evt_1"}`),
			webhooktest.Stripe("whsec_guess", now, `{"id":"evt_1"}`)},
		{"/webhooks/github", `{"action":"opened"}`,
			webhooktest.GitHub("gh", "d-1", `{"action":"opened"}`),
			webhooktest.GitHub("gh", "d-other", `{"action":"opened"}`), // captured, new id: still a duplicate
			webhooktest.GitHub("guess", "d-2", `{"action":"opened"}`)},
		{"/webhooks/acme", `{"event":{"id":"ev_1"}}`,
			webhooktest.HMAC("acme-secret", "X-Signature", "sha256=", false, `{"event":{"id":"ev_1"}}`),
			webhooktest.HMAC("acme-secret", "X-Signature", "sha256=", false, `{"event":{"id":"ev_1"}}`),
			webhooktest.HMAC("guess", "X-Signature", "sha256=", false, `{"event":{"id":"ev_1"}}`)},
	}
	for i, c := range cases {
		if code, body, replayed := post(c.path, c.body, c.wrong); code != 401 || replayed || !strings.Contains(body, "invalid-signature") {
			t.Errorf("%s forged first: %d %q", c.path, code, body)
		}
		code, first, replayed := post(c.path, c.body, c.good)
		if code != 200 || replayed || first != fmt.Sprintf("processed #%d", i+1) {
			t.Errorf("%s first: %d %q replayed=%v", c.path, code, first, replayed)
		}
		if code, again, replayed := post(c.path, c.body, c.again); code != 200 || !replayed || again != first {
			t.Errorf("%s redelivery: %d %q replayed=%v", c.path, code, again, replayed)
		}
		if code, _, _ := post(c.path, c.body+" ", c.good); code != 401 {
			t.Errorf("%s tampered: %d", c.path, code)
		}
	}
	if n := up.Count("POST"); n != len(cases) {
		t.Fatalf("forwarded %d deliveries, want %d", n, len(cases))
	}

	// A forged delivery under another spelling of a webhook's path reaches no
	// upstream. Caddy's path matcher is exact: /webhooks/stripe;x=1 (Tomcat,
	// Jetty, Spring: /webhooks/stripe), /webhooks/stripe/ (Express), and
	// /webhooks/ſtripe (Python's re.IGNORECASE, Java's equalsIgnoreCase) once
	// skipped every idempotency handler and went to the route's reverse_proxy
	// unsigned (a red-team finding after issue 24).
	for _, c := range cases {
		name := strings.TrimPrefix(c.path, "/webhooks/")
		folded := strings.Replace(strings.Replace(name, "s", "%C5%BF", 1), "i", "%C4%B1", 1)
		for _, spelling := range []string{c.path + ";x=1", c.path + "/", c.path + "/x", "/webhooks/" + folded,
			c.path + ".", c.path + "%20", "/Webhooks/" + strings.ToUpper(name) + ";v=1"} {
			if code, body, _ := post(spelling, c.body, c.wrong); code != 401 && code != 404 {
				t.Errorf("forged %s: %d %q; want 401 or 404", spelling, code, body)
			}
		}
	}
	if n := up.Count("POST"); n != len(cases) {
		t.Fatalf("forwarded %d deliveries, want %d: forged ones under other spellings reached the upstream", n, len(cases))
	}
}

// Rotating a webhook secret in its file, then `caddy reload --force` (the
// Caddyfile itself is unchanged, so a plain reload would skip it): deliveries
// signed with the new secret verify, the retired one's get 401, and what was
// stored before the reload is still replayed.
func TestCaddyWebhookSecretRotationOnReload(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewDeliveries(t)
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	os.WriteFile(secrets, []byte("old-secret\n"), 0o600)
	cfg := fmt.Sprintf(globalOptions(dir)+":0 {\n\tidempotency {\n\t\twebhook github\n\t\twebhook_secrets file:%s\n\t}\n\treverse_proxy %s\n}\n",
		secrets, strings.TrimPrefix(up.URL, "http://"))
	path := filepath.Join(dir, "Caddyfile")
	os.WriteFile(path, []byte(cfg), 0o644)
	bin := caddyBinary(t)
	p := runCaddy(t, bin, dir, path)
	deliver := func(secret, body string) testutil.Response {
		return p.Send(t, testutil.Delivery("/hook", body, webhooktest.GitHub(secret, "d", body)))
	}
	if a := deliver("old-secret", `{"n":1}`); a.Status != 200 || a.Replayed {
		t.Fatalf("before the rotation: %+v", a)
	}
	os.WriteFile(secrets, []byte("new-secret\n"), 0o600)
	reload(t, p, bin, dir, path, "--force")
	if a := deliver("new-secret", `{"n":2}`); a.Status != 200 || a.Replayed {
		t.Fatalf("signed with the new secret: %+v", a)
	}
	if a := deliver("old-secret", `{"n":3}`); a.Status != 401 {
		t.Fatalf("signed with the retired secret: %+v", a)
	}
	if a := deliver("new-secret", `{"n":1}`); a.Status != 200 || !a.Replayed || a.Body != "processed #1" {
		t.Fatalf("a redelivery of what ran before the reload: %+v", a)
	}
	if n := up.Count("POST"); n != 2 {
		t.Fatalf("forwarded %d, want 2", n)
	}
}
