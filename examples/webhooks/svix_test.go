package webhooks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

// Svix sends svix-id, svix-timestamp and svix-signature (only some plans send
// the webhook-* names). The standard example accepts them when no webhook-*
// header is present, as Svix's own libraries do: the delivery verifies, runs
// once, and its redelivery (a fresh timestamp and signature) is replayed; the
// same message under the webhook-* names is the same key. The two sets are
// never mixed, and a forged or unsigned Svix delivery is refused.
func TestSvixHeaderNames(t *testing.T) {
	up := testutil.NewDeliveries(t)
	secret := webhooktest.StandardSecret
	addr := start(t, "standard.yaml", up, "STANDARD_WEBHOOK_SECRET="+secret)
	const path = "/webhooks/standard"
	body, now := `{"type":"invoice.paid","data":{"id":"in_1"}}`, time.Now()
	var s scenario
	s.first = deliver(t, addr, path, body, webhooktest.Svix(secret, "msg_svix_1", now, body))
	s.again = deliver(t, addr, path, body, webhooktest.Svix(secret, "msg_svix_1", now.Add(30*time.Second), body))
	mixed := webhooktest.Svix(secret, "msg_svix_2", now, body)
	mixed["webhook-id"] = "msg_svix_2" // a webhook-* header present: the webhook-* set is used, whole
	mixedSig := webhooktest.Svix(secret, "msg_svix_3", now, body)
	mixedSig["webhook-signature"] = mixedSig["svix-signature"]
	delete(mixedSig, "svix-signature")
	forged := webhooktest.Svix(secret, "msg_svix_1", now, body)
	forged["svix-id"] = "msg_svix_future"
	unsigned := webhooktest.Svix(secret, "msg_svix_4", now, body)
	delete(unsigned, "svix-signature")
	s.bad = map[string]answer{
		"tampered body":                  deliver(t, addr, path, strings.Replace(body, "in_1", "in_2", 1), webhooktest.Svix(secret, "msg_svix_5", now, body)),
		"timestamp 10 minutes old":       deliver(t, addr, path, body, webhooktest.Svix(secret, "msg_svix_6", now.Add(-10*time.Minute), body)),
		"pre-claim, forged svix-id":      deliver(t, addr, path, body, forged),
		"unsigned":                       deliver(t, addr, path, body, unsigned),
		"webhook-id with svix-signature": deliver(t, addr, path, body, mixed),
		"svix-id with webhook-signature": deliver(t, addr, path, body, mixedSig),
		"wrong secret":                   deliver(t, addr, path, body, webhooktest.Svix("whsec_Z3Vlc3NlZA==", "msg_svix_7", now, body)),
	}
	check(t, up, s, 1)
	// The same message under the webhook-* names: the same key, replayed.
	if a := deliver(t, addr, path, body, webhooktest.Standard(secret, "msg_svix_1", now, body)); !a.Replayed || a.Body != s.first.Body || up.Count("POST") != 1 {
		t.Fatalf("msg_svix_1 under the webhook-* names: %+v (upstream %d), want the stored answer", a, up.Count("POST"))
	}
	// The id a forger tried to take still runs when the real delivery comes.
	if a := deliver(t, addr, path, body, webhooktest.Svix(secret, "msg_svix_future", now, body)); a.Status != 200 || a.Replayed {
		t.Fatalf("the real msg_svix_future: %+v", a)
	}
}
