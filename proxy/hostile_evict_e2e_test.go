package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// bigUpstream counts executions per Authorization and Idempotency-Key, and
// answers /big?kib=N with N KiB of body (any other path with a short one).
type bigUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	runs map[string]int
}

func newBigUpstream(t *testing.T) *bigUpstream {
	u := &bigUpstream{runs: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("Authorization") + " " + r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.runs[id]++
		n := u.runs[id]
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		if r.URL.Path == "/big" {
			kib, _ := strconv.Atoi(r.URL.Query().Get("kib"))
			_, _ = io.WriteString(w, strings.Repeat("x", kib<<10))
			return
		}
		fmt.Fprintf(w, "charged %s #%d", id, n)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *bigUpstream) count(auth, key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[auth+" "+key]
}

// Issue 24, finding 7: on the memory store, one client's large responses must
// not evict another client's completed record. The victim's charge completes;
// another Authorization then sends 140 requests answered 8 KiB each, far more
// than the 256 KiB store holds; the victim's retry is still a replay, and the
// charge ran once. The flooder pays for its own volume: its oldest records go,
// and none of its requests is refused.
func TestE2EHostileEvictionByAnotherClient(t *testing.T) {
	skipShort(t)
	up := newBigUpstream(t)
	p := start(t, "--upstream", up.URL, "--memory-max-bytes", "256KiB")

	const victim, flooder = "Bearer victim-token", "Bearer flooder-token"
	first := send(t, p.addr, "/charges", "charge-1", `{"amount":100}`, "Authorization", victim)
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("victim's first request: %d replayed=%v %q", first.status, first.replayed, first.body)
	}
	for i := range 140 {
		r := send(t, p.addr, "/big?kib=8", fmt.Sprint("flood-", i), "", "Authorization", flooder)
		if r.status != http.StatusCreated || len(r.body) != 8<<10 {
			t.Fatalf("flood request %d: %d with %d bytes: %.200q", i, r.status, len(r.body), r.body)
		}
	}
	retry := send(t, p.addr, "/charges", "charge-1", `{"amount":100}`, "Authorization", victim)
	if n := up.count(victim, "charge-1"); n != 1 || !retry.replayed || retry.body != first.body {
		t.Fatalf("after another client's flood, the victim's retry ran the charge %d times (status %d, replayed=%v, body %q)",
			n, retry.status, retry.replayed, retry.body)
	}
	// The flooder's newest record is still there: it evicted its own oldest.
	last := send(t, p.addr, "/big?kib=8", "flood-139", "", "Authorization", flooder)
	if !last.replayed || up.count(flooder, "flood-139") != 1 {
		t.Fatalf("the flooder's newest record: replayed=%v, ran %d times", last.replayed, up.count(flooder, "flood-139"))
	}
}
