package proxy_test

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// SIGTERM lets the in-flight request finish and stores its response: a new
// instance on the same Redis replays it.
func TestE2ESigtermDrainsAndStores(t *testing.T) {
	skipShort(t)
	rs := redistest.Start(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", rs.URL())
	done := make(chan testutil.Response, 1)
	go func() { done <- p.Post(t, "/slow?ms=500", "drain", "x") }()
	<-up.Started
	p.Signal(t, syscall.SIGTERM)
	r := <-done
	if r.Status != 201 {
		t.Fatalf("in-flight request during SIGTERM: %+v", r)
	}
	if err := p.Exit(t, 10*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	q := start(t, "--upstream", up.URL, "--store", rs.URL())
	if r := q.Post(t, "/slow?ms=500", "drain", "x"); !r.Replayed || up.Count("drain") != 1 {
		t.Fatalf("after restart: %+v, executions %d", r, up.Count("drain"))
	}
}

// SIGKILL mid-flight: the claim outlives the process until its claim lapses; a
// retry gets 409 until then, and after it the key is held as an unknown
// outcome (504): the killed instance may have had the upstream act. Nothing
// runs twice, on every shared store. With unknown_outcome release, a retry
// runs once after the lapse, as before.
func TestE2ESigkillHoldsTheKey(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		name, store string
		release     bool
	}{
		{"redis", redistest.Start(t).URL(), false},
		{"postgres", pgtest.Start(t).URL(), false},
		{"redis release", redistest.Start(t).URL(), true},
	} {
		t.Run(tc.name, func(t *testing.T) { sigkillMidFlight(t, tc.store, tc.release) })
	}
}

func sigkillMidFlight(t *testing.T, store string, release bool) {
	up := testutil.NewUpstream(t)
	args := []string{"--upstream", up.URL, "--store", store, "--lock-ttl", "1500ms"}
	if release {
		args = append(args, "--unknown-outcome", "release")
	}
	p := start(t, args...)
	go func() { _, _ = testutil.Do(context.Background(), p.Addr, testutil.KeyedPost("/block", "kill", "x")) }()
	<-up.Started
	p.Kill()
	q := start(t, args...)
	if r := q.Post(t, "/pay", "kill", "x"); r.Status != 422 {
		// /pay differs from /block: a different request under the same key.
		t.Fatalf("other request, same key: %+v", r)
	}
	defer up.PassBlocked()() // a retry that reaches the upstream is let through at once
	saw409 := false
	var r testutil.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		if u := q.Post(t, "/slow?ms=0", "kill2", "x"); u.Status != 201 { // an unrelated key keeps working
			t.Fatalf("unrelated key: %+v", u)
		}
		r = q.Post(t, "/block", "kill", "x")
		if r.Status == 409 {
			saw409 = true
		}
		if r.Status != 409 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !saw409 {
		t.Fatal("no 409 while the killed instance's lease was live")
	}
	if release {
		if r.Status != 201 || up.Count("kill") != 2 {
			t.Fatalf("unknown_outcome release, after the lapse: %+v, executions %d; want one retry run", r, up.Count("kill"))
		}
		return
	}
	for i := 0; i < 3; i++ {
		if r.Status != 504 || !strings.Contains(r.Body, "outcome-unknown") || !strings.Contains(r.Body, "stopped before its outcome was stored") {
			t.Fatalf("retry %d after the lease lapsed: %d %s; want the held outcome-unknown answer", i, r.Status, r.Body)
		}
		r = q.Post(t, "/block", "kill", "x")
	}
	if n := up.Count("kill"); n != 1 {
		t.Fatalf("executions of the killed key = %d, want 1", n)
	}
	if !strings.Contains(metricsOf(t, q.Admin), `idemproxy_requests_total{outcome="unknown",route="(top level)"} 1`) {
		t.Fatalf("the lapsed lease found is not counted as one unknown outcome:\n%s", metricsOf(t, q.Admin))
	}
	// The operator sees it in the held list, as a lapsed claim, and settles
	// it by the hash the list gives (no client credential).
	code, out := runBin(t, "keys", "list", "--held", "--admin", q.Admin)
	m := regexp.MustCompile(`"hash": "([0-9a-f]{64})",\s*"kind": "lease_lapsed",\s*"status": 504`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("keys list --held: exit %d, want the lapsed lease listed\n%s", code, out)
	}
	if code, out := runBin(t, "keys", "release", "--hash", m[1], "--admin", q.Admin); code != 0 || !strings.Contains(out, `"released": true`) {
		t.Fatalf("keys release --hash of the lapsed lease: exit %d\n%s", code, out)
	}
	if r := q.Post(t, "/block", "kill", "x"); r.Status != 201 || up.Count("kill") != 2 {
		t.Fatalf("after the release: %+v, executions %d; want the retry run once more", r, up.Count("kill"))
	}
}
