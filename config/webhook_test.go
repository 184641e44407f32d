package config_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/internal/testutil/coretest"
	"github.com/idemproxy/idemproxy/internal/webhooktest"
	"github.com/idemproxy/idemproxy/middleware"
)

// cfg is Default with edit applied.
func cfg(edit func(c *config.Config)) config.Config {
	c := config.Default()
	if edit != nil {
		edit(&c)
	}
	return c
}

// configured builds a handler from a Config, as the proxy and Caddy do.
func configured(t *testing.T, c config.Config, opts ...middleware.Option) *middleware.Handler {
	t.Helper()
	s, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	h, err := middleware.New(store, append([]middleware.Option{middleware.From(s)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

type (
	events  = coretest.Events
	counter = testutil.Counter
	req     = testutil.Req
)

var (
	serve  = testutil.Serve
	result = testutil.ResultOf
)

// Stripe: the key is the signed body's id. A retry re-rendered by the provider
// (another signature time, pending_webhooks changed) replays; a tampered body, a
// stale timestamp or a forged pre-claim is 401 and reaches nothing.
func TestWebhookStripe(t *testing.T) {
	t.Setenv("TEST_STRIPE_SECRET", "whsec_test_stripe")
	var ev events
	c := &counter{}
	h := configured(t, cfg(func(c *config.Config) { c.Webhook = "stripe"; c.WebhookSecrets = []string{"env:TEST_STRIPE_SECRET"} }),
		func(s *middleware.Settings) { s.Observer = ev.Observe }).Wrap(c)
	deliver := func(body string, at time.Time, secret string) testutil.Result {
		return result(serve(h, req{Body: body, Header: webhooktest.Header(webhooktest.Stripe(secret, at, body))}))
	}
	now := time.Now()
	body := `{"id":"evt_1","type":"charge.succeeded","pending_webhooks":1}`
	if r := deliver(body, now, "whsec_test_stripe"); r.Status != 201 || r.Replayed {
		t.Fatalf("first delivery: %+v", r)
	}
	retry := strings.Replace(body, `"pending_webhooks":1`, `"pending_webhooks":2`, 1)
	if r := deliver(retry, now.Add(time.Minute), "whsec_test_stripe"); r.Status != 201 || !r.Replayed {
		t.Fatalf("redelivery: %+v", r)
	}
	// Tampered body under a valid signature of another.
	tampered := req{Body: strings.Replace(body, "evt_1", "evt_2", 1), Header: webhooktest.Header(webhooktest.Stripe("whsec_test_stripe", now, body))}
	w := serve(h, tampered)
	if w.Code != 401 || !strings.Contains(w.Body.String(), "invalid-signature") || w.Header().Get("WWW-Authenticate") == "" {
		t.Fatalf("tampered: %d %s %v", w.Code, w.Body, w.Header())
	}
	if r := deliver(`{"id":"evt_3"}`, now.Add(-10*time.Minute), "whsec_test_stripe"); r.Status != 401 {
		t.Fatalf("stale timestamp: %+v", r)
	}
	// Pre-claim of a future event id with a forged signature: refused, and the
	// real delivery then runs (it does not get 422 forever).
	if r := deliver(`{"id":"evt_4","forged":true}`, now, "whsec_guess"); r.Status != 401 {
		t.Fatalf("forged pre-claim: %+v", r)
	}
	if r := deliver(`{"id":"evt_4"}`, now, "whsec_test_stripe"); r.Status != 201 || r.Replayed {
		t.Fatalf("real delivery after a forged pre-claim: %+v", r)
	}
	if n := c.Calls.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2 (evt_1, evt_4)", n)
	}
	var invalid int
	for _, o := range ev.Outcomes() {
		if o == middleware.OutcomeInvalidSignature {
			invalid++
		}
	}
	if invalid != 3 {
		t.Fatalf("invalid_signature outcomes = %d, want 3: %v", invalid, ev.Outcomes())
	}
	// A signed delivery without an id passes through untracked, as a request
	// without a key does; with require_key it is 400.
	if r := deliver(`{"object":"event"}`, now, "whsec_test_stripe"); r.Status != 201 {
		t.Fatalf("no id: %+v", r)
	}
	strict := configured(t, cfg(func(c *config.Config) {
		c.Webhook = "stripe"
		c.WebhookSecrets = []string{"env:TEST_STRIPE_SECRET"}
		c.RequireKey = true
	})).Wrap(c)
	w = serve(strict, req{Body: `{"id":7}`, Header: webhooktest.Header(webhooktest.Stripe("whsec_test_stripe", now, `{"id":7}`))})
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
	h := configured(t, cfg(func(c *config.Config) { c.Webhook = "standard"; c.WebhookSecrets = []string{"file:" + secrets} })).Wrap(c)
	now, body := time.Now(), `{"type":"invoice.paid"}`
	for i, secret := range []string{webhooktest.StandardSecret, "whsec_c2Vjb25k"} {
		r := result(serve(h, req{Body: body, Header: webhooktest.Header(webhooktest.Standard(secret, "msg_1", now.Add(time.Duration(i)*time.Second), body))}))
		if r.Status != 201 || r.Replayed != (i > 0) {
			t.Fatalf("delivery %d: %+v", i, r)
		}
	}
	forged := webhooktest.Standard(webhooktest.StandardSecret, "msg_1", now, body)
	forged["webhook-id"] = "msg_2"
	if r := result(serve(h, req{Body: body, Header: webhooktest.Header(forged)})); r.Status != 401 {
		t.Fatalf("forged id: %+v", r)
	}
	if n := c.Calls.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// GitHub: the delivery id is not signed, so the key is the signed body: the same
// body under a new delivery id is a duplicate.
func TestWebhookGitHub(t *testing.T) {
	t.Setenv("TEST_GH_SECRET", "gh-secret")
	c := &counter{}
	h := configured(t, cfg(func(c *config.Config) { c.Webhook = "github"; c.WebhookSecrets = []string{"env:TEST_GH_SECRET"} })).Wrap(c)
	body := `{"action":"opened","number":1}`
	for i, id := range []string{"d-1", "d-1", "d-forged"} {
		r := result(serve(h, req{Body: body, Header: webhooktest.Header(webhooktest.GitHub("gh-secret", id, body))}))
		if r.Status != 201 || r.Replayed != (i > 0) {
			t.Fatalf("delivery %d (%s): %+v", i, id, r)
		}
	}
	if r := result(serve(h, req{Body: body + " ", Header: webhooktest.Header(webhooktest.GitHub("gh-secret", "d-2", body))})); r.Status != 401 {
		t.Fatalf("tampered: %+v", r)
	}
	if n := c.Calls.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// Keys from the body, without a signature.
func TestKeySources(t *testing.T) {
	c := &counter{}
	jsonKey := configured(t, cfg(func(c *config.Config) { c.KeySourceSpec = "json:/data/idempotency_key" })).Wrap(c)
	body := `{"data":{"idempotency_key":"sq-1","amount":5}}`
	for i := 0; i < 2; i++ {
		if r := result(serve(jsonKey, req{Body: body})); r.Status != 201 || r.Replayed != (i > 0) {
			t.Fatalf("json key %d: %+v", i, r)
		}
	}
	if r := result(serve(jsonKey, req{Body: `{"data":{"idempotency_key":"sq-1","amount":6}}`})); r.Status != 422 {
		t.Fatalf("json key reused with another body: %+v", r)
	}
	// Missing, non-string, not JSON: no key; not required, so passed through.
	before := c.Calls.Load()
	for _, b := range []string{`{"data":{}}`, `{"data":{"idempotency_key":42}}`, `not json`, ``} {
		if r := result(serve(jsonKey, req{Body: b})); r.Status != 201 || r.Replayed {
			t.Fatalf("%q: %+v", b, r)
		}
	}
	if got := c.Calls.Load() - before; got != 4 {
		t.Fatalf("pass-throughs = %d, want 4", got)
	}
	if w := serve(jsonKey, req{Body: `{"data":{"idempotency_key":""}}`}); w.Code != 400 || !strings.Contains(w.Body.String(), "invalid-key") {
		t.Fatalf("empty key: %d %s", w.Code, w.Body)
	}
	if w := serve(jsonKey, req{Body: `{"data":{"idempotency_key":"` + strings.Repeat("k", 256) + `"}}`}); w.Code != 400 {
		t.Fatalf("long key: %d %s", w.Code, w.Body)
	}
	required := configured(t, cfg(func(c *config.Config) { c.KeySourceSpec = "json:/a~1b/0"; c.RequireKey = true })).Wrap(c)
	if w := serve(required, req{Body: `{"a/b":[1]}`}); w.Code != 400 || !strings.Contains(w.Body.String(), "missing-key") {
		t.Fatalf("non-string, required: %d %s", w.Code, w.Body)
	}
	if r := result(serve(required, req{Body: `{"a/b":["k"]}`})); r.Status != 201 {
		t.Fatalf("escaped pointer into an array: %+v", r)
	}

	form := configured(t, cfg(func(c *config.Config) { c.KeySourceSpec = "form:idempotency_key" })).Wrap(c)
	ct := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	for i := 0; i < 2; i++ {
		if r := result(serve(form, req{Body: "amount=5&idempotency_key=f-1", Header: ct})); r.Status != 201 || r.Replayed != (i > 0) {
			t.Fatalf("form key %d: %+v", i, r)
		}
	}
	if w := serve(form, req{Body: "idempotency_key=a&idempotency_key=b", Header: ct}); w.Code != 400 {
		t.Fatalf("form key twice: %d %s", w.Code, w.Body)
	}

	digest := configured(t, cfg(func(c *config.Config) { c.KeySourceSpec = "body" })).Wrap(c)
	before = c.Calls.Load()
	for i := 0; i < 2; i++ {
		if r := result(serve(digest, req{Body: "same"})); r.Status != 201 || r.Replayed != (i > 0) {
			t.Fatalf("body key %d: %+v", i, r)
		}
	}
	if got := c.Calls.Load() - before; got != 1 {
		t.Fatalf("body key executions = %d, want 1", got)
	}
}

func TestWebhookConfigErrorsName(t *testing.T) {
	t.Setenv("TEST_SET", "whsec_x")
	cases := map[string]struct {
		c     config.Config
		field string
	}{
		"variable unset": {cfg(func(c *config.Config) { c.Webhook = "stripe"; c.WebhookSecrets = []string{"env:TEST_UNSET_VARIABLE"} }), "webhook_secrets"},
		"literal secret": {cfg(func(c *config.Config) { c.Webhook = "stripe"; c.WebhookSecrets = []string{"whsec_literal_value"} }), "webhook_secrets"},
		"missing file":   {cfg(func(c *config.Config) { c.Webhook = "stripe"; c.WebhookSecrets = []string{"file:/nonexistent/x"} }), "webhook_secrets"},
		"no secrets":     {cfg(func(c *config.Config) { c.Webhook = "github" }), "webhook_secrets"},
		"header with preset": {cfg(func(c *config.Config) {
			c.Webhook = "github"
			c.WebhookSecrets = []string{"env:TEST_SET"}
			c.KeySourceSpec = "header"
		}), "key_source"},
		"zero tolerance": {cfg(func(c *config.Config) {
			c.Webhook = "stripe"
			c.WebhookSecrets = []string{"env:TEST_SET"}
			c.WebhookTolerance = 0
		}), "webhook_tolerance"},
		"bad pointer":         {cfg(func(c *config.Config) { c.KeySourceSpec = "json:id" }), "key_source"},
		"unknown source":      {cfg(func(c *config.Config) { c.KeySourceSpec = "query:id" }), "key_source"},
		"hmac without header": {cfg(func(c *config.Config) { c.Webhook = "hmac"; c.WebhookSecrets = []string{"env:TEST_SET"} }), "webhook_header"},
	}
	for name, c := range cases {
		err := c.c.Validate()
		if f, _ := config.FieldOf(err); f != c.field {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.field)
		}
		if err != nil && strings.Contains(err.Error(), "literal_value") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

// webhook_tolerance is webhook.New's rule on this surface too: a set 0s is
// refused for a preset that signs a timestamp, never read as the default, and
// not read by a preset that signs none.
func TestWebhookToleranceZero(t *testing.T) {
	t.Setenv("TEST_SET", "whsec_eA==")
	for preset, refused := range map[string]bool{"standard": true, "stripe": true, "github": false} {
		c := config.Default()
		for _, kv := range [][2]string{{"webhook", preset}, {"webhook_secrets", "env:TEST_SET"}, {"webhook_tolerance", "0s"}} {
			if err := c.Set(kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
		err := c.Validate()
		if f, _ := config.FieldOf(err); refused && (f != "webhook_tolerance" || err.Error() != "webhook_tolerance: must be positive, got 0s") || !refused && err != nil {
			t.Errorf("%s, webhook_tolerance 0s: %v", preset, err)
		}
	}
}

// A body above max_request_body is 413 before any signature is checked.
func TestWebhookBodyTooLarge(t *testing.T) {
	t.Setenv("TEST_GH_SECRET", "gh")
	c := &counter{}
	h := configured(t, cfg(func(c *config.Config) {
		c.Webhook = "github"
		c.WebhookSecrets = []string{"env:TEST_GH_SECRET"}
		c.MaxRequestBody = 16
	})).Wrap(c)
	body := strings.Repeat("x", 17)
	if w := serve(h, req{Body: body, Header: webhooktest.Header(webhooktest.GitHub("gh", "d", body))}); w.Code != 413 || c.Calls.Load() != 0 {
		t.Fatalf("%d %s, calls %d", w.Code, w.Body, c.Calls.Load())
	}
}
func TestErrorFormatConfig(t *testing.T) {
	for spec, want := range map[string]string{
		"xml":                          `"xml": want problem, stripe, or a JSON template`,
		`{"a":`:                        "the template is not JSON",
		`{"a":"{nope}"}`:               "unknown placeholder {nope}",
		`{"a":"fixed"}`:                "uses no placeholder",
		`{"a":"{detail}"} {"b":"x"}`:   "text after its JSON value",
		`{"a":"{detail}","b":"{x y}"}`: "",
		`{"a":"{{detail}}"}`:           "",
	} {
		err := cfg(func(c *config.Config) { c.ErrorFormatSpec = spec }).Validate()
		if f, _ := config.FieldOf(err); want == "" && err != nil || want != "" && (f != "error_format" || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", spec, err, want)
		}
	}
}
