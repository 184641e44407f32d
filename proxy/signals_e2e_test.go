package proxy_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/redistest"
)

// SIGTERM lets the in-flight request finish and stores its response: a new
// instance on the same Redis replays it.
func TestE2ESigtermDrainsAndStores(t *testing.T) {
	skipShort(t)
	rs := redistest.Start(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", rs.URL())
	done := make(chan result, 1)
	go func() { done <- send(t, p.addr, "/slow?ms=500", "drain", "x") }()
	<-up.started
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.status != 201 {
		t.Fatalf("in-flight request during SIGTERM: %+v", r)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr)
		}
		p.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("idemproxy did not exit after SIGTERM")
	}
	q := start(t, "--upstream", up.URL, "--store", rs.URL())
	if r := send(t, q.addr, "/slow?ms=500", "drain", "x"); !r.replayed || up.count("drain") != 1 {
		t.Fatalf("after restart: %+v, executions %d", r, up.count("drain"))
	}
}

// SIGKILL mid-flight: the lock outlives the process until its lease lapses; a retry
// gets 409 until then, and runs exactly once after.
func TestE2ESigkillLeaseLapses(t *testing.T) {
	skipShort(t)
	rs := redistest.Start(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", rs.URL(), "--lock-ttl", "1500ms")
	go func() { _, _ = sendErr(context.Background(), p.addr, "/block", "kill", "x") }()
	<-up.started
	_ = p.cmd.Process.Kill()
	q := start(t, "--upstream", up.URL, "--store", rs.URL(), "--lock-ttl", "1500ms")
	if r := send(t, q.addr, "/pay", "kill", "x"); r.status != 422 {
		// /pay differs from /block: a different request under the same key.
		t.Fatalf("other request, same key: %+v", r)
	}
	stop, exited := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-exited }()
	go func() { // a retry that reaches the upstream is let through at once
		defer close(exited)
		for {
			select {
			case <-up.started:
				select {
				case up.release <- struct{}{}:
				case <-stop:
					return
				}
			case <-stop:
				return
			}
		}
	}()
	saw409 := false
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := send(t, q.addr, "/slow?ms=0", "kill2", "x") // an unrelated key keeps working
		if r.status != 201 {
			t.Fatalf("unrelated key: %+v", r)
		}
		r = send(t, q.addr, "/block", "kill", "x")
		if r.status == 409 {
			saw409 = true
		}
		if r.status == 201 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !saw409 {
		t.Fatal("no 409 while the killed instance's lease was live")
	}
	if up.count("kill") != 2 {
		t.Fatalf("executions of the killed key = %d, want 2 (the killed one, then one retry)", up.count("kill"))
	}
	if r := send(t, q.addr, "/block", "kill", "x"); !r.replayed {
		t.Fatalf("after the retry ran: %+v", r)
	}
}
