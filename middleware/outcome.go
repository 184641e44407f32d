package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemproxy/idemproxy/cache"
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

// unknownProblem is the answer to a first execution whose outcome is unknown,
// and to its retries while the key is held.
func unknownProblem(status int, held bool) Problem {
	detail := "the request reached the upstream and no complete answer came back, so it may have been executed; " +
		"it was not run again, and a retry with this key runs it only once it is found not to have been executed"
	if !held {
		detail = "the request reached the upstream and no complete answer came back, so it may have been executed; " +
			"a retry with the same key runs it again"
	}
	return newProblem(ProblemOutcomeUnknown, status, detail)
}

// lapsedProblem is the answer to a key whose first execution's lease lapsed.
func lapsedProblem(status int) Problem {
	return newProblem(ProblemOutcomeUnknown, status, "the instance running the request with this idempotency key stopped before its outcome was stored "+
		"(or could not write to the store), so it may have been executed; it was not run again, "+
		"and a retry with this key runs it only once it is found not to have been executed")
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

// Resolution is what an operator found out about a held unknown outcome: the
// answer the upstream gave (or would have given) to the first execution.
type Resolution struct {
	Status int
	Header http.Header
	Body   []byte
}

// Validate reports what makes r unusable as a stored answer.
func (r *Resolution) Validate() error {
	if r.Status < 200 || r.Status > 599 {
		return fmt.Errorf("resolution: status must be 200-599, got %d", r.Status)
	}
	if len(r.Body) > 0 && !bodyAllowed(r.Status) {
		return fmt.Errorf("resolution: a %d response has no body", r.Status)
	}
	return nil
}

// Resolve settles a held unknown outcome under storeKey (see StoreKey), in one
// atomic store operation. With a nil res it releases the key: the next retry
// runs. Otherwise every retry of the first request is answered res, marked
// Idempotent-Replayed, for the handler's ttl (and a different request under the
// key 422, as for any answer). It fails with cache.ErrNotFound when no record is
// held and with cache.ErrNotUnknown when the record is anything but a held
// unknown outcome (an answer, or a request still in flight), changing nothing.
func (h *Handler) Resolve(ctx context.Context, storeKey string, res *Resolution) error {
	var resp *cache.Response
	if res != nil {
		if err := res.Validate(); err != nil {
			return err
		}
		hdr := make(http.Header, len(res.Header))
		for name, vals := range res.Header {
			hdr[http.CanonicalHeaderKey(name)] = vals
		}
		hdr = storableHeader(hdr, h.ignored)
		delete(hdr, "Content-Length") // the replay writes the body's own
		if _, ok := hdr[h.keyHeader]; ok {
			h.markKeyEcho(hdr) // the retry's own key, never the key itself in the store
		}
		resp = &cache.Response{Status: res.Status, Header: hdr, Body: res.Body, BodySize: int64(len(res.Body))}
	}
	return h.store.Resolve(ctx, storeKey, resp, h.s.TTL)
}
