package caddymodule

// The result placeholder: what the handler did with a request, for access logs
// and the header directive.

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

// resultWriter sets the result placeholder as the response's headers go out
// (so the header directive reads it): for a first execution, whether the core
// stores a response of that status (stored, or not_stored: the key is
// released); for a request passed through, why it was (bypass, store_error).
// The core's event sets the final outcome when the request ends, for the
// access log (log_append).
type resultWriter struct {
	*caddyhttp.ResponseWriterWrapper
	result func(status int) string
	repl   *caddy.Replacer
	set    bool
}

func (w *resultWriter) WriteHeader(code int) {
	if !w.set && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.set = true
		w.repl.Set(ResultPlaceholder, w.result(code))
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

func (w *resultWriter) Write(p []byte) (int, error) {
	if !w.set {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriterWrapper.Write(p)
}

// withResult wraps w in a resultWriter for r, when r has a replacer and is a
// first execution or a pass-through of the core.
func (h *Handler) withResult(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return w
	}
	first, pass := middleware.Running(r)
	var result func(int) string
	switch {
	case first && !middleware.IsGRPC(r): // a gRPC call's status comes in its trailers
		s := h.core.Settings()
		result = func(code int) string {
			if s.InFlightOnly || !s.StoreStatuses.Has(code) {
				return string(middleware.OutcomeNotStored)
			}
			return string(middleware.OutcomeStored)
		}
	case pass != "":
		result = func(int) string { return string(pass) }
	default:
		return w
	}
	return &resultWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, result: result, repl: repl}
}
