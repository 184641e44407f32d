package proxy_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Issue 24, finding 7: on the memory store, one client's large responses must
// not evict another client's completed record. The victim's charge completes;
// another Authorization then sends 140 requests answered 8 KiB each, far more
// than the 256 KiB store holds; the victim's retry is still a replay, and the
// charge ran once. The flooder pays for its own volume: its oldest records go,
// and none of its requests is refused.
func TestE2EHostileEvictionByAnotherClient(t *testing.T) {
	skipShort(t)
	// The upstream counts runs by Authorization and key, and answers /big?kib=N
	// with N KiB.
	up := testutil.NewUpstream(t, testutil.CountBy(testutil.ByHeader("Authorization", "Idempotency-Key")))
	p := start(t, "--upstream", up.URL, "--memory-max-bytes", "256KiB")

	const victim, flooder = "Bearer victim-token", "Bearer flooder-token"
	first := p.Post(t, "/charges", "charge-1", `{"amount":100}`, "Authorization", victim)
	if first.Status != http.StatusCreated || first.Replayed {
		t.Fatalf("victim's first request: %d replayed=%v %q", first.Status, first.Replayed, first.Body)
	}
	for i := range 140 {
		r := p.Post(t, "/big?kib=8", fmt.Sprint("flood-", i), "", "Authorization", flooder)
		if r.Status != http.StatusCreated || len(r.Body) != 8<<10 {
			t.Fatalf("flood request %d: %d with %d bytes: %.200q", i, r.Status, len(r.Body), r.Body)
		}
	}
	retry := p.Post(t, "/charges", "charge-1", `{"amount":100}`, "Authorization", victim)
	if n := up.Count(victim + " charge-1"); n != 1 || !retry.Replayed || retry.Body != first.Body {
		t.Fatalf("after another client's flood, the victim's retry ran the charge %d times (status %d, replayed=%v, body %q)",
			n, retry.Status, retry.Replayed, retry.Body)
	}
	// The flooder's newest record is still there: it evicted its own oldest.
	last := p.Post(t, "/big?kib=8", "flood-139", "", "Authorization", flooder)
	if !last.Replayed || up.Count(flooder+" flood-139") != 1 {
		t.Fatalf("the flooder's newest record: replayed=%v, ran %d times", last.Replayed, up.Count(flooder+" flood-139"))
	}
}
