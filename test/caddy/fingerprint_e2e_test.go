package caddy_test

import (
	"strconv"
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

// Inside real Caddy: fingerprint json refuses an object whose member names a
// case-insensitive reader takes for one (400, not forwarded); fingerprint form
// keeps the order of such names, so the other order is 422, not a replay.
func TestCaddyFingerprintFoldedNames(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewUpstream(t)
	addr := caddyIdempotencySite(t, "\t\tfingerprint json\n", up.URL)
	for i, body := range []string{`{"amount":100,"Amount":1}`, `{"o":{"k":1,"\u212a":2}}`} {
		key := "cj" + strconv.Itoa(i)
		if r := testutil.Send(t, addr, testutil.KeyedPost("/pay", key, body)); r.Status != 400 || !strings.Contains(r.Body, "body-malformed") || up.Count(key) != 0 {
			t.Fatalf("%s: %+v, executions %d", body, r, up.Count(key))
		}
	}
	addr = caddyIdempotencySite(t, "\t\tfingerprint form\n", up.URL)
	ct := []string{"Content-Type", "application/x-www-form-urlencoded"}
	first := testutil.Send(t, addr, testutil.KeyedPost("/pay", "cf", "amount.total=100&amount_total=1", ct...))
	swapped := testutil.Send(t, addr, testutil.KeyedPost("/pay", "cf", "amount_total=1&amount.total=100", ct...))
	if first.Status != 201 || swapped.Status != 422 || swapped.Replayed || !strings.Contains(swapped.Body, "the order of form fields") || up.Count("cf") != 1 {
		t.Fatalf("first %+v, swapped %+v, executions %d", first, swapped, up.Count("cf"))
	}
}
