package middleware

import (
	"context"
	"net/http"

	"github.com/idemproxy/idemproxy/internal/status"
)

// passThrough calls next untracked, noting the status for the observer.
func (h *Handler) passThrough(w http.ResponseWriter, r *http.Request, next Next, ev *Event) error {
	sw := &status.Writer{ResponseWriter: w}
	err := next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), runningKey{}, ev.Outcome)))
	ev.Status = sw.Status
	if err == nil {
		ev.Status = sw.Final()
	}
	if err != nil && ev.Err == nil {
		ev.Err = err
	}
	return err
}

// runningKey marks the context of a request the core passed to next with
// how it did (Running): outcomeFirst, or the outcome of a pass-through.
type runningKey struct{}

// outcomeFirst marks a first execution in runningKey.
const outcomeFirst Outcome = "first"

// Running says, inside next, how the core passed r on: first for a first
// execution (the request that claimed its key, whose response the core
// records and stores when its status is one of store_statuses); else pass,
// the outcome of a request passed through untracked (OutcomeBypass: no key
// and none required; OutcomeStoreError: the store failed under fail_open).
// Both are zero for a request that did not come through the core.
func Running(r *http.Request) (first bool, pass Outcome) {
	o, _ := r.Context().Value(runningKey{}).(Outcome)
	if o == outcomeFirst {
		return true, ""
	}
	return false, o
}
