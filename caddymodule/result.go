package caddymodule

// The placeholders: what the handler did with a request, and its key hash,
// for access logs and the header directive.

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemproxy/idemproxy/middleware"
)

// ResultPlaceholder says what the handler did with the request, for access
// logs (log_append) and the header directive: "executing" while a first
// execution runs, until its response's headers go out; then "stored" or
// "not_stored" (its status is not stored: the key is released), which the
// request's final outcome replaces when it ends (stored, not_stored, unknown,
// not_replayable, store_error); "replayed", "conflict", "mismatch",
// "invalid", "overloaded", … for an answer of the core's; "bypass" (no key)
// and "store_error" (fail_open) for a request passed through; "untracked"
// for a method the handler does not track: the outcomes of
// middleware.Outcomes.
const ResultPlaceholder = "http.idempotency.result"

// KeyHashPlaceholder is the request's key hash: the key_hash (12 hex
// digits) the handler's log lines, Caddy's admin API (admin.api.idempotency)
// and idemproxy print for its key, so that Caddy's access log (log_append)
// can be joined to the held list. It is set for every tracked request with
// a valid key, before an answer the core writes itself (a replay, a
// conflict, a held key's answer) and, for a first execution, when it ends:
// a header directive reads it on the core's own answers, the access log on
// every one. Unset without a key.
const KeyHashPlaceholder = "http.idempotency.key_hash"

// resultWriter sets the result placeholder as the response's headers go
// out (so the header directive reads it), when nothing set it since the
// handler began (it reads "executing"): the core's event comes before the
// answers it writes itself to a duplicate (replays, problems), but after the
// ones it writes to a first execution. So, for a first execution, whether
// the core stores a response of that status (stored, or not_stored: the key
// is released); for the core's own outcome-unknown answer to one (after
// handler_timeout, or reverse_proxy's timeout once the request was sent),
// unknown; for a request passed through, why it was (bypass, store_error).
// The core's event sets the final outcome when the request ends, for the
// access log (log_append).
type resultWriter struct {
	caddyhttp.ResponseWriterWrapper // (not a pointer: one allocation)

	repl *caddy.Replacer
	// result is the value for a status that next wrote, or that the core
	// wrote for it (the 200 of a handler that wrote nothing); nil until the
	// core passed the request on (classified sets it), and for a gRPC
	// call's first execution (its status comes in its trailers).
	result func(status int) string
	inNext bool // next is running: what it writes is its own answer
	set    bool
}

func (w *resultWriter) WriteHeader(code int) {
	if !w.set && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.set = true
		if v, _ := w.repl.GetString(ResultPlaceholder); v == resultExecuting {
			switch {
			case !w.inNext && w.Header().Get(middleware.ProblemHeader) == middleware.ProblemOutcomeUnknown:
				w.repl.Set(ResultPlaceholder, string(middleware.OutcomeUnknown))
			case w.result != nil:
				w.repl.Set(ResultPlaceholder, w.result(code))
			}
		}
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

func (w *resultWriter) Write(p []byte) (int, error) {
	if !w.set {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriterWrapper.Write(p)
}

// resultExecuting is the result while a first execution runs, until its
// response's headers go out.
const resultExecuting = "executing"

// passedOn sets, once the core passed r on to next, the value w gives a
// status of next's: for a first execution, stored or not_stored; for a
// request passed through, why.
func (h *Handler) passedOn(w *resultWriter, r *http.Request) {
	first, pass := middleware.Running(r)
	switch {
	case first && !middleware.IsGRPC(r): // a gRPC call's status comes in its trailers
		s := h.core.Settings()
		w.result = func(code int) string {
			if s.InFlightOnly || !s.StoreStatuses.Has(code) {
				return string(middleware.OutcomeNotStored)
			}
			return string(middleware.OutcomeStored)
		}
	case pass != "":
		w.result = func(int) string { return string(pass) }
	}
}
