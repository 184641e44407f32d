package middleware

import (
	"net/http"
	"time"
)

// Outcome says what the core did with a tracked request.
type Outcome string

// Outcomes reported to the observer.
const (
	OutcomeStored        Outcome = "stored"         // first execution; response stored
	OutcomeNotStored     Outcome = "not_stored"     // first execution; status not stored, error or panic: key released
	OutcomeReplayed      Outcome = "replayed"       // stored response replayed
	OutcomeConflict      Outcome = "conflict"       // 409: the first request is still in flight
	OutcomeMismatch      Outcome = "mismatch"       // 422: key reused with a different request
	OutcomeNotReplayable Outcome = "not_replayable" // completed, but the response was too large to store
	OutcomeInvalid       Outcome = "invalid"        // 400/413: missing, invalid key or body
	OutcomeBypass        Outcome = "bypass"         // no key and none required: passed through
	OutcomeStoreError    Outcome = "store_error"    // store failed: 503, or passed through when failing open
	OutcomeUnknown       Outcome = "unknown"        // first execution sent, no complete answer: key held (or released by policy)
	// 401: the webhook signature did not verify; nothing claimed or forwarded
	OutcomeInvalidSignature Outcome = "invalid_signature"
	// 503: the request's body did not fit in body_budget; nothing claimed or forwarded
	OutcomeOverloaded Outcome = "overloaded"
)

// Outcomes lists every outcome, for metrics that pre-declare their labels.
var Outcomes = []Outcome{
	OutcomeStored, OutcomeNotStored, OutcomeReplayed, OutcomeConflict, OutcomeMismatch,
	OutcomeNotReplayable, OutcomeInvalid, OutcomeBypass, OutcomeStoreError, OutcomeUnknown,
	OutcomeInvalidSignature, OutcomeOverloaded,
}

// Event describes one tracked request once its outcome is known.
type Event struct {
	Outcome Outcome
	// Status is the status sent to the client (0 if nothing was sent, e.g. a
	// hijacked connection or an error returned to the caller of Handle). For
	// an answer the core wrote to a gRPC call, which goes as HTTP 200 with a
	// grpc-status, it is the HTTP status the answer stands for (409, 502…).
	Status int
	// Duration is the time spent in Handle.
	Duration time.Duration
	// StoreDuration is the time spent in the claim (ClaimOrGet) call.
	StoreDuration time.Duration
	// KeyHash is a short hash of the store key, safe to log; empty when the request
	// had no valid key.
	KeyHash string
	// Request is the client's request.
	Request *http.Request
	// Err is the store error, the error returned by next, or the problem's cause.
	Err error
	// Origin is, for a duplicate (replayed, conflict, mismatch,
	// not_replayable), the trace context the first execution stored (see
	// Settings.TraceContext): link the duplicate's span to it. Nil otherwise.
	Origin []byte
}
