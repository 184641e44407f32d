package middleware

import (
	"context"
	"net/http"
)

// passThrough calls next untracked, noting the status for the observer.
func (h *Handler) passThrough(w http.ResponseWriter, r *http.Request, next Next, ev *Event) error {
	sw := &statusWriter{ResponseWriter: w}
	err := next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), runningKey{}, ev.Outcome)))
	ev.Status = sw.status
	if ev.Status == 0 && err == nil {
		ev.Status = http.StatusOK
	}
	if err != nil && ev.Err == nil {
		ev.Err = err
	}
	return err
}

// statusWriter notes the status of a response passed through untracked.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.status == 0 && code >= 200 {
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(p []byte) (int, error) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	return sw.ResponseWriter.Write(p)
}

func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

func (sw *statusWriter) Flush() { _ = http.NewResponseController(sw.ResponseWriter).Flush() }

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
