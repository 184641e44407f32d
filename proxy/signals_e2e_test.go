package proxy_test

import (
	"context"
	"syscall"
	"testing"
	"time"

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

// SIGKILL mid-flight: the lock outlives the process until its lease lapses; a retry
// gets 409 until then, and runs exactly once after.
func TestE2ESigkillLeaseLapses(t *testing.T) {
	skipShort(t)
	rs := redistest.Start(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", rs.URL(), "--lock-ttl", "1500ms")
	go func() { _, _ = testutil.Do(context.Background(), p.Addr, testutil.KeyedPost("/block", "kill", "x")) }()
	<-up.Started
	p.Kill()
	q := start(t, "--upstream", up.URL, "--store", rs.URL(), "--lock-ttl", "1500ms")
	if r := q.Post(t, "/pay", "kill", "x"); r.Status != 422 {
		// /pay differs from /block: a different request under the same key.
		t.Fatalf("other request, same key: %+v", r)
	}
	defer up.PassBlocked()() // a retry that reaches the upstream is let through at once
	saw409 := false
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := q.Post(t, "/slow?ms=0", "kill2", "x") // an unrelated key keeps working
		if r.Status != 201 {
			t.Fatalf("unrelated key: %+v", r)
		}
		r = q.Post(t, "/block", "kill", "x")
		if r.Status == 409 {
			saw409 = true
		}
		if r.Status == 201 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !saw409 {
		t.Fatal("no 409 while the killed instance's lease was live")
	}
	if up.Count("kill") != 2 {
		t.Fatalf("executions of the killed key = %d, want 2 (the killed one, then one retry)", up.Count("kill"))
	}
	if r := q.Post(t, "/block", "kill", "x"); !r.Replayed {
		t.Fatalf("after the retry ran: %+v", r)
	}
}
