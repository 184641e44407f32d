package webhook

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

// The published Standard Webhooks vector under Svix's header names verifies,
// and the key is read from the same set the signature was checked under; a
// delivery that mixes the sets does not verify.
func TestStandardAcceptsSvixNames(t *testing.T) {
	v, err := New(Webhook{Preset: Standard, Secrets: []string{webhooktest.StandardSecret}, Tolerance: DefaultTolerance})
	if err != nil {
		t.Fatal(err)
	}
	v.now = func() time.Time { return time.Unix(webhooktest.StandardTimestamp, 0) }
	ks := v.KeySource()
	svix := func(extra ...string) http.Header {
		h := webhooktest.Header(map[string]string{"svix-id": webhooktest.StandardID, "svix-timestamp": "1614265330",
			"svix-signature": webhooktest.StandardSignature})
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return h
	}
	body := []byte(webhooktest.StandardBody)
	key := func(h http.Header) string {
		k, err := ks.Key(&http.Request{Header: h}, body)
		if err != nil {
			t.Fatalf("key: %v", err)
		}
		return k
	}
	if err := v.verifyHeader(svix(), body); err != nil {
		t.Fatalf("the vector under svix-* names: %v", err)
	}
	if k := key(svix()); k != webhooktest.StandardID {
		t.Fatalf("key of a svix-* delivery: %q", k)
	}
	for name, h := range map[string]http.Header{
		"webhook-id beside the svix set":        svix("Webhook-Id", webhooktest.StandardID),
		"webhook-signature beside the svix set": svix("Webhook-Signature", webhooktest.StandardSignature),
		"webhook-timestamp beside the svix set": svix("Webhook-Timestamp", "1614265330"),
	} {
		if err := v.verifyHeader(h, body); !errors.Is(err, errSigMissing) {
			t.Errorf("%s: %v, want a missing webhook-* header (the sets are never mixed)", name, err)
		}
	}
	// A full webhook-* set wins, whole: its id is the key, whatever svix-id says.
	both := svix("Webhook-Id", "msg_other", "Webhook-Timestamp", "1614265330", "Webhook-Signature", webhooktest.StandardSignature)
	if err := v.verifyHeader(both, body); !errors.Is(err, errSigMismatch) {
		t.Errorf("webhook-* set signed for another id: %v, want a mismatch", err)
	}
	if k := key(both); k != "msg_other" {
		t.Errorf("key with both sets: %q, want the webhook-id", k)
	}
	if err := v.verifyHeader(svix("Svix-Signature", "v1,Zm9yZ2Vk"), body); !errors.Is(err, errSigMismatch) {
		t.Errorf("forged svix-signature: %v", err)
	}
	if err := v.verifyHeader(http.Header{}, body); err == nil || err.Error() != "the request carries no signature: no Webhook-Signature header" {
		t.Errorf("no headers at all: %v", err)
	}
}
