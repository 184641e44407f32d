package middleware_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	const n = 200
	release := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(201)
		_, _ = w.Write([]byte("charged"))
	}}
	h := newHandler(t, newMem(t)).Wrap(c)

	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- serve(h, req{Key: "same", Body: "x"}).Code
		}()
	}
	// Every duplicate but the one executing answers 409 while it is blocked.
	got := map[int]int{}
	for i := 0; i < n-1; i++ {
		got[<-codes]++
	}
	close(release)
	wg.Wait()
	got[<-codes]++
	if c.Calls.Load() != 1 || got[201] != 1 || got[409] != n-1 {
		t.Fatalf("calls = %d, statuses = %v; want 1 call, one 201 and %d 409s", c.Calls.Load(), got, n-1)
	}
	// And after completion, concurrent duplicates all replay.
	var replayed sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		replayed.Add(1)
		go func() {
			defer replayed.Done()
			w := serve(h, req{Key: "same", Body: "x"})
			if w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "charged" {
				errs <- fmt.Sprintf("%d %q", w.Code, w.Body)
			}
		}()
	}
	replayed.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("replay: %s", e)
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d after replays", c.Calls.Load())
	}
}

func TestMismatchWinsOverInFlight(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-release }}
	h := newHandler(t, newMem(t)).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "k", Body: "a"}) }()
	<-started
	if w := serve(h, req{Key: "k", Body: "b"}); w.Code != 422 {
		t.Fatalf("different body while in flight: %d, want 422", w.Code)
	}
	w := serve(h, req{Key: "k", Body: "a"})
	if w.Code != 409 {
		t.Fatalf("same request while in flight: %d, want 409", w.Code)
	}
	checkProblem(t, w.Header(), w.Body.Bytes(), 409, middleware.ProblemInFlight)
	close(release)
	<-done
}
