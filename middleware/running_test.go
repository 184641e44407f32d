package middleware_test

import (
	"net/http"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

// Inside next, Running says how the core passed the request on: a first
// execution, or a pass-through and why.
func TestRunning(t *testing.T) {
	type seen struct {
		first bool
		pass  middleware.Outcome
	}
	var got []seen
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first, pass := middleware.Running(r)
		got = append(got, seen{first, pass})
		w.WriteHeader(201)
	})
	h := newHandler(t, newMem(t)).Wrap(next)
	serve(h, req{Key: "run"})
	serve(h, req{Key: "run"}) // replayed: next is not called
	serve(h, req{})           // no key: passed through
	if want := []seen{{true, ""}, {false, middleware.OutcomeBypass}}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Running inside next: %+v, want %+v", got, want)
	}
	if first, pass := middleware.Running(&http.Request{}); first || pass != "" {
		t.Fatalf("a request that did not come through the core: %v %q", first, pass)
	}
}
