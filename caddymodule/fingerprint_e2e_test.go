package caddymodule

import (
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Inside real Caddy: fingerprint json replays a retry serialised anew and
// names the member of one that changed.
func TestCaddyJSONFingerprint(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewUpstream(t)
	addr := caddyIdempotencySite(t, "\t\tfingerprint json\n\t\tfingerprint_ignore /request_time\n", up.URL)
	first := testutil.Send(t, addr, testutil.KeyedPost("/pay", "c1", `{"amount":5,"to":"x","request_time":1}`))
	again := testutil.Send(t, addr, testutil.KeyedPost("/pay", "c1", `{ "to" : "x", "amount" : 5.0, "request_time" : 2 }`))
	if first.Status != 201 || !again.Replayed || up.Count("c1") != 1 {
		t.Fatalf("first %+v, again %+v, executions %d", first, again, up.Count("c1"))
	}
	changed := testutil.Send(t, addr, testutil.KeyedPost("/pay", "c1", `{"to":"y","amount":5}`))
	if changed.Status != 422 || !strings.Contains(changed.Body, "differs in /to") || strings.Contains(changed.Body, `\"y\"`) {
		t.Fatalf("changed: %+v", changed)
	}
}
