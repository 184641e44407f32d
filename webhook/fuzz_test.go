package webhook

import (
	"net/http"
	"testing"
	"time"
)

// Signature headers are attacker input: no value panics a verifier, and none
// verifies without the secret.
func FuzzWebhookVerify(f *testing.F) {
	f.Add("t=1,v1=00,v1=zz", "v1,AAAA v1a,BBBB", "sha256=00", "1614265330", []byte(`{"id":"evt_1"}`))
	f.Add("", "", "", "", []byte{})
	f.Add("t=,v1=", "v1,", "sha256=", "-1", []byte("x"))
	var vs []*Verifier
	for _, w := range []Webhook{
		{Preset: Standard, Secrets: []string{"whsec_c2VjcmV0"}, Tolerance: DefaultTolerance},
		{Preset: Stripe, Secrets: []string{"s"}, Tolerance: DefaultTolerance},
		{Preset: GitHub, Secrets: []string{"s"}},
		{Preset: HMAC, Secrets: []string{"s"}, Header: "X-Sig", Encoding: "base64", Prefix: "v0="},
	} {
		v, err := New(w)
		if err != nil {
			f.Fatal(err)
		}
		v.now = func() time.Time { return time.Unix(1614265330, 0) }
		vs = append(vs, v)
	}
	f.Fuzz(func(t *testing.T, stripeSig, stdSig, ghSig, ts string, body []byte) {
		h := http.Header{}
		h.Set("Stripe-Signature", stripeSig)
		h.Set("Webhook-Signature", stdSig)
		h.Set("Webhook-Id", "msg_1")
		h.Set("Webhook-Timestamp", ts)
		h.Set("X-Hub-Signature-256", ghSig)
		h.Set("X-Sig", ghSig)
		for _, v := range vs {
			if err := v.verifyHeader(h, body); err == nil {
				t.Fatalf("%s verified a fuzzed signature: %q %q %q", v.Preset, stripeSig, stdSig, ghSig)
			}
		}
	})
}
