package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

// The published vectors verify, and Sign reproduces them.
func TestWebhookPublishedVectors(t *testing.T) {
	std := Webhook{Preset: Standard, Secrets: []string{webhooktest.StandardSecret}, Tolerance: DefaultTolerance}
	v, err := New(std)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(webhooktest.StandardTimestamp, 0)
	v.now = func() time.Time { return at.Add(4 * time.Minute) }
	h := webhooktest.Header(map[string]string{"webhook-id": webhooktest.StandardID, "webhook-timestamp": "1614265330",
		"webhook-signature": "v1,bm9wZQ== " + webhooktest.StandardSignature})
	if err := v.verifyHeader(h, []byte(webhooktest.StandardBody)); err != nil {
		t.Fatalf("Standard Webhooks vector: %v", err)
	}
	signed, err := std.Sign(webhooktest.StandardID, at, []byte(webhooktest.StandardBody))
	if err != nil || signed.Get("Webhook-Signature") != webhooktest.StandardSignature {
		t.Fatalf("Sign: %v %v, want %s", signed, err, webhooktest.StandardSignature)
	}
	v.now = func() time.Time { return at.Add(6 * time.Minute) }
	if err := v.verifyHeader(h, []byte(webhooktest.StandardBody)); !errors.Is(err, errSigOld) {
		t.Fatalf("6 minutes late: %v, want errSigOld", err)
	}
	v.now = func() time.Time { return at.Add(-6 * time.Minute) }
	if err := v.verifyHeader(h, []byte(webhooktest.StandardBody)); !errors.Is(err, errSigOld) {
		t.Fatalf("6 minutes early: %v, want errSigOld", err)
	}

	gh := Webhook{Preset: GitHub, Secrets: []string{"old secret", webhooktest.GitHubSecret}}
	gv, err := New(gh)
	if err != nil {
		t.Fatal(err)
	}
	if err := gv.verifyHeader(webhooktest.Header(map[string]string{"X-Hub-Signature-256": webhooktest.GitHubSignature}), []byte(webhooktest.GitHubBody)); err != nil {
		t.Fatalf("GitHub vector with the second secret: %v", err)
	}
	gh.Secrets = gh.Secrets[1:]
	if signed, _ := gh.Sign("", time.Now(), []byte(webhooktest.GitHubBody)); signed.Get("X-Hub-Signature-256") != webhooktest.GitHubSignature {
		t.Fatalf("Sign: %v, want %s", signed, webhooktest.GitHubSignature)
	}
}

// Each preset against deliveries signed as the provider documents, and tampering.
func TestWebhookVerify(t *testing.T) {
	now := time.Now()
	body := `{"id":"evt_1","type":"charge.succeeded"}`
	cases := []struct {
		name string
		w    Webhook
		good map[string]string
		bad  map[string]map[string]string // name → headers that must fail
		err  error
	}{
		{name: "standard", w: Webhook{Preset: Standard, Secrets: []string{"whsec_" + "c2VjcmV0LXR3bw==", webhooktest.StandardSecret}, Tolerance: DefaultTolerance},
			good: webhooktest.Standard(webhooktest.StandardSecret, "msg_1", now, body),
			bad: map[string]map[string]string{
				"other id":     merge(webhooktest.Standard(webhooktest.StandardSecret, "msg_1", now, body), map[string]string{"webhook-id": "msg_2"}),
				"old":          webhooktest.Standard(webhooktest.StandardSecret, "msg_1", now.Add(-10*time.Minute), body),
				"other secret": webhooktest.Standard("whsec_c2VjcmV0LXRocmVl", "msg_1", now, body),
				"none":         {"webhook-id": "msg_1", "webhook-timestamp": "1"},
			}},
		{name: "stripe", w: Webhook{Preset: Stripe, Secrets: []string{"whsec_stripe"}, Tolerance: DefaultTolerance},
			good: webhooktest.Stripe("whsec_stripe", now, body),
			bad: map[string]map[string]string{
				"old":          webhooktest.Stripe("whsec_stripe", now.Add(-6*time.Minute), body),
				"future":       webhooktest.Stripe("whsec_stripe", now.Add(6*time.Minute), body),
				"other secret": webhooktest.Stripe("whsec_other", now, body),
				"no v1":        {"Stripe-Signature": "t=1,v0=abc"},
				"none":         {},
			}},
		{name: "github", w: Webhook{Preset: GitHub, Secrets: []string{"gh"}},
			good: webhooktest.GitHub("gh", "d-1", body),
			bad: map[string]map[string]string{
				"other secret": webhooktest.GitHub("nope", "d-1", body),
				"sha1 only":    {"X-Hub-Signature": "sha1=00"},
			}},
		{name: "hmac base64", w: Webhook{Preset: HMAC, Secrets: []string{"s"}, Header: "X-Sig", Encoding: "base64", Prefix: "v0="},
			good: webhooktest.HMAC("s", "X-Sig", "v0=", true, body),
			bad: map[string]map[string]string{
				"hex":       webhooktest.HMAC("s", "X-Sig", "v0=", false, body),
				"no prefix": webhooktest.HMAC("s", "X-Sig", "", true, body),
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := New(c.w)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.verifyHeader(webhooktest.Header(c.good), []byte(body)); err != nil {
				t.Fatalf("good delivery: %v", err)
			}
			if err := v.verifyHeader(webhooktest.Header(c.good), []byte(body+" ")); !errors.Is(err, errSigMismatch) {
				t.Fatalf("tampered body: %v", err)
			}
			for name, h := range c.bad {
				if err := v.verifyHeader(webhooktest.Header(h), []byte(body)); err == nil {
					t.Errorf("%s: verified", name)
				}
			}
		})
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func TestWebhookConfigErrors(t *testing.T) {
	cases := map[string]struct {
		w     Webhook
		field string
	}{
		"no secret":          {Webhook{Preset: Stripe}, "webhook_secrets"},
		"bad standard":       {Webhook{Preset: Standard, Secrets: []string{"whsec_!!"}}, "webhook_secrets"},
		"unknown preset":     {Webhook{Preset: "svix", Secrets: []string{"x"}}, "webhook"},
		"hmac no header":     {Webhook{Preset: HMAC, Secrets: []string{"x"}}, "webhook_header"},
		"hmac bad encoding":  {Webhook{Preset: HMAC, Secrets: []string{"x"}, Header: "X-S", Encoding: "b32"}, "webhook_encoding"},
		"header with stripe": {Webhook{Preset: Stripe, Secrets: []string{"x"}, Header: "X-S"}, "webhook_header"},
		"negative tolerance": {Webhook{Preset: Stripe, Secrets: []string{"x"}, Tolerance: -1}, "webhook_tolerance"},
	}
	for name, c := range cases {
		_, err := New(c.w)
		if f, _ := fieldOf(err); f != c.field {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.field)
		}
		if err != nil && len(c.w.Secrets) > 0 && c.w.Secrets[0] != "x" && strings.Contains(err.Error(), c.w.Secrets[0]) {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

// verifyHeader verifies a request carrying h.
func (v *Verifier) verifyHeader(h http.Header, body []byte) error {
	return v.Verify(&http.Request{Header: h}, body)
}

// fieldOf is the setting named in err.
func fieldOf(err error) (string, bool) {
	var se *cache.FieldError
	if errors.As(err, &se) {
		return se.Field, true
	}
	return "", false
}
