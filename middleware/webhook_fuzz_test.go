package middleware

import (
	"encoding/json"
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
	var vs []*verifier
	for _, w := range []Webhook{
		{Preset: WebhookStandard, Secrets: []string{"whsec_c2VjcmV0"}},
		{Preset: WebhookStripe, Secrets: []string{"s"}},
		{Preset: WebhookGitHub, Secrets: []string{"s"}},
		{Preset: WebhookHMAC, Secrets: []string{"s"}, Header: "X-Sig", Encoding: "base64", Prefix: "v0="},
	} {
		v, err := w.compile()
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
			if err := v.verify(h, body); err == nil {
				t.Fatalf("%s verified a fuzzed signature: %q %q %q", v.Preset, stripeSig, stdSig, ghSig)
			}
		}
	})
}

// A key at a JSON pointer is what a full decode finds there, and no body panics.
func FuzzJSONPointerKey(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1"}`), "/id")
	f.Add([]byte(`{"a":{"b":["x","y"]}}`), "/a/b/1")
	f.Add([]byte(`{"a/b":{"~":"k"}}`), "/a~1b/~0")
	f.Add([]byte(`[1,{"id":2}]`), "/1/id")
	f.Add([]byte(`{"id":"a","id":"b"}`), "/id")
	f.Fuzz(func(t *testing.T, body []byte, pointer string) {
		ptr, err := parsePointer(pointer)
		if err != nil {
			return
		}
		got, ok := jsonString(body, ptr)
		var doc any
		if json.Unmarshal(body, &doc) != nil {
			if ok {
				t.Fatalf("a key %q from a body that is not JSON: %q", got, body)
			}
			return
		}
		cur := doc
		for _, tok := range ptr {
			switch c := cur.(type) {
			case map[string]any:
				cur = c[tok]
			case []any:
				i := -1
				for j := range c {
					if tok == itoa(j) {
						i = j
					}
				}
				if i < 0 {
					cur = nil
				} else {
					cur = c[i]
				}
			default:
				cur = nil
			}
		}
		want, isString := cur.(string)
		if ok != isString || ok && got != want {
			t.Fatalf("%q at %s: got %q (%v), a full decode finds %#v", body, pointer, got, ok, cur)
		}
	})
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
