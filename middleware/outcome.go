package middleware

import (
	"errors"
	"fmt"
	"net/http"
)

// How a first execution ended, as the packaging knows it. Next returns an error
// that wraps one of these (errors.Is) to classify a failure; an error that wraps
// neither is treated as before: the key is released and a retry runs again.
var (
	// ErrNotSent: the request provably never reached the upstream (a dial error,
	// a refused connection, a failed TLS handshake). The key is released.
	ErrNotSent = errors.New("request not sent upstream")
	// ErrOutcomeUnknown: the request was sent and no complete answer came back (a
	// reset or EOF after the write, a timeout, a body cut mid-stream). The
	// upstream may have acted, so under the hold policy the key is held: every
	// retry gets the same outcome-unknown answer, and nothing runs again until an
	// operator releases the key or unknown_hold passes.
	ErrOutcomeUnknown = errors.New("outcome unknown: the request was sent, no complete answer came back")
)

// Unknown-outcome policies.
const (
	UnknownHold    = "hold"
	UnknownRelease = "release"
)

// unknownProblem is the answer to a first execution whose outcome is unknown,
// and to its retries while the key is held.
func unknownProblem(status int, held bool) Problem {
	detail := "the request reached the upstream and no complete answer came back, so it may have been executed; " +
		"it was not, and will not be, run again with this key"
	if !held {
		detail = "the request reached the upstream and no complete answer came back, so it may have been executed; " +
			"a retry with the same key runs it again"
	}
	return newProblem(ProblemOutcomeUnknown, status, detail)
}

// unknownStatus is 504 for a timeout, 502 otherwise.
func unknownStatus(err error) int {
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// MarkNotSent wraps err as ErrNotSent.
func MarkNotSent(err error) error { return fmt.Errorf("%w: %w", ErrNotSent, err) }

// MarkOutcomeUnknown wraps err as ErrOutcomeUnknown.
func MarkOutcomeUnknown(err error) error { return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err) }
