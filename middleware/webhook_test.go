package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/webhooktest"
	"github.com/idemproxy/idemproxy/middleware"
)

// configured builds a handler from a Config, as the proxy and Caddy do.
func configured(t *testing.T, c middleware.Config, opts ...middleware.Option) *middleware.Handler {
	t.Helper()
	o, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	return newHandler(t, newMem(t), append(o, opts...)...)
}

func str(s string) *string { return &s }

type httptestResult struct {
	status   int
	replayed bool
	body     string
}

func result(w *httptest.ResponseRecorder) *httptestResult {
	return &httptestResult{w.Code, w.Header().Get("Idempotent-Replayed") == "true", w.Body.String()}
}

// Stripe: the key is the signed body's id. A retry re-rendered by the provider
// (another signature time, pending_webhooks changed) replays; a tampered body, a
// stale timestamp or a forged pre-claim is 401 and reaches nothing.
func TestWebhookStripe(t *testing.T) {
	t.Setenv("TEST_STRIPE_SECRET", "whsec_test_stripe")
	var ev events
	c := &counter{}
	h := configured(t, middleware.Config{Webhook: str("stripe"), WebhookSecrets: []string{"env:TEST_STRIPE_SECRET"}},
		middleware.WithObserver(ev.observe)).Wrap(c)
	deliver := func(body string, at time.Time, secret string) *httptestResult {
		return result(serve(h, req{body: body, header: webhooktest.Header(webhooktest.Stripe(secret, at, body))}))
	}
	now := time.Now()
	body := `{"id":"evt_1","type":"charge.succeeded","pending_webhooks":1}`
	if r := deliver(body, now, "whsec_test_stripe"); r.status != 201 || r.replayed {
		t.Fatalf("first delivery: %+v", r)
	}
	retry := strings.Replace(body, `"pending_webhooks":1`, `"pending_webhooks":2`, 1)
	if r := deliver(retry, now.Add(time.Minute), "whsec_test_stripe"); r.status != 201 || !r.replayed {
		t.Fatalf("redelivery: %+v", r)
	}
	// Tampered body under a valid signature of another.
	tampered := req{body: strings.Replace(body, "evt_1", "evt_2", 1), header: webhooktest.Header(webhooktest.Stripe("whsec_test_stripe", now, body))}
	w := serve(h, tampered)
	if w.Code != 401 || !strings.Contains(w.Body.String(), "invalid-signature") || w.Header().Get("WWW-Authenticate") == "" {
		t.Fatalf("tampered: %d %s %v", w.Code, w.Body, w.Header())
	}
	if r := deliver(`{"id":"evt_3"}`, now.Add(-10*time.Minute), "whsec_test_stripe"); r.status != 401 {
		t.Fatalf("stale timestamp: %+v", r)
	}
	// Pre-claim of a future event id with a forged signature: refused, and the
	// real delivery then runs (it does not get 422 forever).
	if r := deliver(`{"id":"evt_4","forged":true}`, now, "whsec_guess"); r.status != 401 {
		t.Fatalf("forged pre-claim: %+v", r)
	}
	if r := deliver(`{"id":"evt_4"}`, now, "whsec_test_stripe"); r.status != 201 || r.replayed {
		t.Fatalf("real delivery after a forged pre-claim: %+v", r)
	}
	if n := c.calls.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2 (evt_1, evt_4)", n)
	}
	var invalid int
	for _, o := range ev.outcomes() {
		if o == middleware.OutcomeInvalidSignature {
			invalid++
		}
	}
	if invalid != 3 {
		t.Fatalf("invalid_signature outcomes = %d, want 3: %v", invalid, ev.outcomes())
	}
	// A signed delivery without an id passes through unprotected, as a request
	// without a key does; with require_key it is 400.
	if r := deliver(`{"object":"event"}`, now, "whsec_test_stripe"); r.status != 201 {
		t.Fatalf("no id: %+v", r)
	}
	strict := configured(t, middleware.Config{Webhook: str("stripe"), WebhookSecrets: []string{"env:TEST_STRIPE_SECRET"},
		RequireKey: new(true)}).Wrap(c)
	w = serve(strict, req{body: `{"id":7}`, header: webhooktest.Header(webhooktest.Stripe("whsec_test_stripe", now, `{"id":7}`))})
	if w.Code != 400 || !strings.Contains(w.Body.String(), "a string at /id in its JSON body") {
		t.Fatalf("non-string id, key required: %d %s", w.Code, w.Body)
	}
}

// Standard Webhooks: the key is the signed webhook-id; a forged id is 401.
func TestWebhookStandard(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	// Rotation: the old and the new secret both verify.
	os.WriteFile(secrets, []byte("# rotated on Monday\n"+webhooktest.StandardSecret+"\n\nwhsec_c2Vjb25k\n"), 0o600)
	c := &counter{}
	h := configured(t, middleware.Config{Webhook: str("standard"), WebhookSecrets: []string{"file:" + secrets}}).Wrap(c)
	now, body := time.Now(), `{"type":"invoice.paid"}`
	for i, secret := range []string{webhooktest.StandardSecret, "whsec_c2Vjb25k"} {
		r := result(serve(h, req{body: body, header: webhooktest.Header(webhooktest.Standard(secret, "msg_1", now.Add(time.Duration(i)*time.Second), body))}))
		if r.status != 201 || r.replayed != (i > 0) {
			t.Fatalf("delivery %d: %+v", i, r)
		}
	}
	forged := webhooktest.Standard(webhooktest.StandardSecret, "msg_1", now, body)
	forged["webhook-id"] = "msg_2"
	if r := result(serve(h, req{body: body, header: webhooktest.Header(forged)})); r.status != 401 {
		t.Fatalf("forged id: %+v", r)
	}
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// GitHub: the delivery id is not signed, so the key is the signed body: the same
// body under a new delivery id is a duplicate.
func TestWebhookGitHub(t *testing.T) {
	t.Setenv("TEST_GH_SECRET", "gh-secret")
	c := &counter{}
	h := configured(t, middleware.Config{Webhook: str("github"), WebhookSecrets: []string{"env:TEST_GH_SECRET"}}).Wrap(c)
	body := `{"action":"opened","number":1}`
	for i, id := range []string{"d-1", "d-1", "d-forged"} {
		r := result(serve(h, req{body: body, header: webhooktest.Header(webhooktest.GitHub("gh-secret", id, body))}))
		if r.status != 201 || r.replayed != (i > 0) {
			t.Fatalf("delivery %d (%s): %+v", i, id, r)
		}
	}
	if r := result(serve(h, req{body: body + " ", header: webhooktest.Header(webhooktest.GitHub("gh-secret", "d-2", body))})); r.status != 401 {
		t.Fatalf("tampered: %+v", r)
	}
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// Keys from the body, without a signature.
func TestKeySources(t *testing.T) {
	c := &counter{}
	jsonKey := configured(t, middleware.Config{KeySource: str("json:/data/idempotency_key")}).Wrap(c)
	body := `{"data":{"idempotency_key":"sq-1","amount":5}}`
	for i := 0; i < 2; i++ {
		if r := result(serve(jsonKey, req{body: body})); r.status != 201 || r.replayed != (i > 0) {
			t.Fatalf("json key %d: %+v", i, r)
		}
	}
	if r := result(serve(jsonKey, req{body: `{"data":{"idempotency_key":"sq-1","amount":6}}`})); r.status != 422 {
		t.Fatalf("json key reused with another body: %+v", r)
	}
	// Missing, non-string, not JSON: no key; not required, so passed through.
	before := c.calls.Load()
	for _, b := range []string{`{"data":{}}`, `{"data":{"idempotency_key":42}}`, `not json`, ``} {
		if r := result(serve(jsonKey, req{body: b})); r.status != 201 || r.replayed {
			t.Fatalf("%q: %+v", b, r)
		}
	}
	if got := c.calls.Load() - before; got != 4 {
		t.Fatalf("pass-throughs = %d, want 4", got)
	}
	if w := serve(jsonKey, req{body: `{"data":{"idempotency_key":""}}`}); w.Code != 400 || !strings.Contains(w.Body.String(), "invalid-key") {
		t.Fatalf("empty key: %d %s", w.Code, w.Body)
	}
	if w := serve(jsonKey, req{body: `{"data":{"idempotency_key":"` + strings.Repeat("k", 256) + `"}}`}); w.Code != 400 {
		t.Fatalf("long key: %d %s", w.Code, w.Body)
	}
	required := configured(t, middleware.Config{KeySource: str("json:/a~1b/0"), RequireKey: new(true)}).Wrap(c)
	if w := serve(required, req{body: `{"a/b":[1]}`}); w.Code != 400 || !strings.Contains(w.Body.String(), "missing-key") {
		t.Fatalf("non-string, required: %d %s", w.Code, w.Body)
	}
	if r := result(serve(required, req{body: `{"a/b":["k"]}`})); r.status != 201 {
		t.Fatalf("escaped pointer into an array: %+v", r)
	}

	form := configured(t, middleware.Config{KeySource: str("form:idempotency_key")}).Wrap(c)
	ct := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	for i := 0; i < 2; i++ {
		if r := result(serve(form, req{body: "amount=5&idempotency_key=f-1", header: ct})); r.status != 201 || r.replayed != (i > 0) {
			t.Fatalf("form key %d: %+v", i, r)
		}
	}
	if w := serve(form, req{body: "idempotency_key=a&idempotency_key=b", header: ct}); w.Code != 400 {
		t.Fatalf("form key twice: %d %s", w.Code, w.Body)
	}

	digest := configured(t, middleware.Config{KeySource: str("body")}).Wrap(c)
	before = c.calls.Load()
	for i := 0; i < 2; i++ {
		if r := result(serve(digest, req{body: "same"})); r.status != 201 || r.replayed != (i > 0) {
			t.Fatalf("body key %d: %+v", i, r)
		}
	}
	if got := c.calls.Load() - before; got != 1 {
		t.Fatalf("body key executions = %d, want 1", got)
	}
}

func TestWebhookConfigErrorsName(t *testing.T) {
	t.Setenv("TEST_SET", "whsec_x")
	cases := map[string]struct {
		c     middleware.Config
		field string
	}{
		"variable unset":      {middleware.Config{Webhook: str("stripe"), WebhookSecrets: []string{"env:TEST_UNSET_VARIABLE"}}, "webhook_secrets"},
		"literal secret":      {middleware.Config{Webhook: str("stripe"), WebhookSecrets: []string{"whsec_literal_value"}}, "webhook_secrets"},
		"missing file":        {middleware.Config{Webhook: str("stripe"), WebhookSecrets: []string{"file:/nonexistent/x"}}, "webhook_secrets"},
		"no secrets":          {middleware.Config{Webhook: str("github")}, "webhook_secrets"},
		"header with preset":  {middleware.Config{Webhook: str("github"), WebhookSecrets: []string{"env:TEST_SET"}, KeySource: str("header")}, "key_source"},
		"zero tolerance":      {middleware.Config{Webhook: str("stripe"), WebhookSecrets: []string{"env:TEST_SET"}, WebhookTolerance: new(middleware.Duration)}, "webhook_tolerance"},
		"bad pointer":         {middleware.Config{KeySource: str("json:id")}, "key_source"},
		"unknown source":      {middleware.Config{KeySource: str("query:id")}, "key_source"},
		"hmac without header": {middleware.Config{Webhook: str("hmac"), WebhookSecrets: []string{"env:TEST_SET"}}, "webhook_header"},
	}
	for name, c := range cases {
		err := c.c.Validate()
		if f, _ := middleware.FieldOf(err); f != c.field {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.field)
		}
		if err != nil && strings.Contains(err.Error(), "literal_value") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

// A body above max_request_body is 413 before any signature is checked.
func TestWebhookBodyTooLarge(t *testing.T) {
	t.Setenv("TEST_GH_SECRET", "gh")
	one := middleware.Size(16)
	c := &counter{}
	h := configured(t, middleware.Config{Webhook: str("github"), WebhookSecrets: []string{"env:TEST_GH_SECRET"}, MaxRequestBody: &one}).Wrap(c)
	body := strings.Repeat("x", 17)
	if w := serve(h, req{body: body, header: webhooktest.Header(webhooktest.GitHub("gh", "d", body))}); w.Code != 413 || c.calls.Load() != 0 {
		t.Fatalf("%d %s, calls %d", w.Code, w.Body, c.calls.Load())
	}
}
