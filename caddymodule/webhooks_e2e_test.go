package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	var forwarded atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			fmt.Fprintf(w, "processed #%d", forwarded.Add(1))
		}
	}))
	defer up.Close()
	dir := t.TempDir()
	secrets := filepath.Join(dir, "acme")
	os.WriteFile(secrets, []byte("acme-secret\n"), 0o600)
	site := freePort(t)
	for k, v := range map[string]string{
		"WEBHOOKS_SITE": ":" + site, "WEBHOOKS_ADMIN": "127.0.0.1:" + freePort(t),
		"WEBHOOKS_UPSTREAM":       strings.TrimPrefix(up.URL, "http://"),
		"STANDARD_WEBHOOK_SECRET": webhooktest.StandardSecret, "STRIPE_WEBHOOK_SECRET": "whsec_stripe",
		"GITHUB_WEBHOOK_SECRET": "gh", "ACME_WEBHOOK_SECRETS_FILE": secrets,
	} {
		t.Setenv(k, v)
	}
	runCaddy(t, caddyBinary(t), dir, "../examples/webhooks/Caddyfile")
	base := "http://127.0.0.1:" + site
	waitHTTP(t, base+"/webhooks/standard")

	post := func(path, body string, h map[string]string) (int, string, bool) {
		t.Helper()
		a := testutil.PostWith(t, base+path, body, h)
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
	if n := forwarded.Load(); n != int64(len(cases)) {
		t.Fatalf("forwarded %d deliveries, want %d", n, len(cases))
	}
}
