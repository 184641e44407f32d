package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

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

// MarkNotSent wraps err as ErrNotSent.
func MarkNotSent(err error) error { return fmt.Errorf("%w: %w", ErrNotSent, err) }

// MarkOutcomeUnknown wraps err as ErrOutcomeUnknown.
func MarkOutcomeUnknown(err error) error { return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err) }

// Held is a first execution whose key is held as an unknown outcome, as
// Settings.OnHold is told of it. Its fields are only valid during the call.
type Held struct {
	StoreKey string        // the record's key in the store
	Key      string        // the client's idempotency key
	Request  *http.Request // the first execution's request (its body already read)
	Body     []byte        // its buffered body
	Hold     time.Duration // how long the key is held (unknown_hold)
	// Sent is when the first execution began (its request went upstream
	// then, or after): the upstream may still be working on it for as long
	// as it may take a request. For a claim that lapsed, it is when the key
	// was claimed, and Request and Body are the retry's that found it (the
	// same request: its fingerprint is the first execution's).
	Sent time.Time
}

// errClaimLapsed is a held key's reason when its first execution's claim
// lapsed: the instance running it stopped (crashed, killed) or its store
// writes stopped before its outcome was stored.
var errClaimLapsed = errors.New("the first execution's claim lapsed before its outcome was stored")

// lapsed reports a claim that lapsed, which this request found first
// (rec.Found): the key is held as an unknown outcome, and the route's
// follow-up (Settings.OnHold: reconcile) is told, with this request, which is
// the first execution's (the same fingerprint).
func (h *Handler) lapsed(r *http.Request, c *claim, key string, body []byte, rec *cache.Record) {
	h.logger.LogAttrs(r.Context(), slog.LevelWarn, "idempotency claim lapsed before the outcome was stored: the key is held, retries will not run again",
		slog.String("key_hash", c.keyHash), slog.Time("claimed", rec.CreatedAt), slog.Duration("unknown_hold", h.s.UnknownHold))
	if h.s.OnHold == nil {
		return
	}
	held := Held{StoreKey: c.storeKey, Key: key, Request: r, Body: body, Hold: h.s.UnknownHold, Sent: rec.CreatedAt}
	if err := h.s.OnHold(context.WithoutCancel(r.Context()), held); err != nil {
		h.logger.LogAttrs(r.Context(), slog.LevelError, "idempotency outcome unknown: the hold's follow-up failed; an operator settles the key",
			slog.String("key_hash", c.keyHash), slog.Any("error", err))
	}
}

// settleUnknown settles a first execution whose outcome is unknown. Under the
// hold policy it stores the outcome-unknown problem for unknown_hold, so every
// retry gets it and nothing runs again, and answers it when nothing was written
// yet (answer); it reports whether it answered. Under the release policy it
// releases the key.
func (c *claim) settleUnknown(rw *recorder, answer bool) bool {
	h := c.h
	c.ev.Outcome = OutcomeUnknown
	if h.s.UnknownOutcome == UnknownRelease || h.s.InFlightOnly {
		c.stopRenewal()
		c.release()
		return false
	}
	if h.s.OnHold != nil && c.held != nil {
		held := *c.held
		held.Hold, held.Sent = h.s.UnknownHold, c.started
		if err := h.s.OnHold(context.WithoutCancel(c.ctx), held); err != nil {
			h.logger.LogAttrs(c.ctx, slog.LevelError, "idempotency outcome unknown: the hold's follow-up failed; an operator settles the key",
				slog.String("key_hash", c.keyHash), slog.Any("error", err))
		}
	}
	status := unknownStatus(c.ev.Err)
	c.info = cache.WithEvent(c.ClaimInfo(), cache.Event{Kind: cache.EventHeld, By: cache.ByNoAnswer, At: time.Now()})
	h.logger.LogAttrs(c.ctx, slog.LevelWarn, "idempotency outcome unknown: the key is held, retries will not run again",
		slog.String("key_hash", c.keyHash), slog.Duration("unknown_hold", h.s.UnknownHold), slog.Any("error", c.ev.Err))
	err := c.store(h.unknownAnswer(status, c.trace), h.s.UnknownHold)
	if errors.Is(err, cache.ErrFull) {
		// A full store (a bounded memory store whose room belongs to other
		// clients) keeps a record no larger than the claim it replaces: the
		// held outcome without its rendered answer, which a replay renders.
		err = c.store(&cache.Response{Status: status, Unknown: true, Trace: c.trace}, h.s.UnknownHold)
	}
	if errors.Is(err, cache.ErrClaimLost) || errors.Is(err, cache.ErrFull) {
		c.ev.Err = err
	}
	if answer && rw.status == 0 {
		h.writeProblem(rw, unknownProblem(status, true), 0, c.echo, c.grpc)
		c.ev.Status = status
		return true
	}
	return false
}

// unknownAnswer is the stored answer of a held unknown outcome, in the route's
// error format: every retry gets these bytes. Every retry carries its own key
// back (the same key), filled in at replay: the key itself is never stored.
func (h *Handler) unknownAnswer(status int, trace []byte) *cache.Response {
	return h.render(unknownProblem(status, true), trace)
}

// render is the answer of held unknown outcome p.
func (h *Handler) render(p Problem, trace []byte) *cache.Response {
	status := p.Status
	ct, hdr, body := h.errorFormat.Render(p, 0)
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Content-Type", ct)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set(ProblemHeader, ProblemOutcomeUnknown)
	h.markKeyEcho(hdr)
	return &cache.Response{Status: status, Unknown: true, Body: body, BodySize: int64(len(body)), Header: hdr, Trace: trace}
}

// heldProblem is the problem of rec, a held unknown outcome (its response is
// Unknown): its instance's claim lapsed, or its first execution got no
// complete answer.
func heldProblem(rec *cache.Record) Problem {
	if rec.Lapsed {
		return lapsedProblem(rec.Response.Status)
	}
	return unknownProblem(rec.Response.Status, true)
}

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

// lapsedProblem is the answer to a key whose first execution's claim lapsed.
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
// The record's history names an operator as its settler (Settle names
// another).
func (h *Handler) Resolve(ctx context.Context, storeKey string, res *Resolution) error {
	_, err := h.Settle(ctx, storeKey, res, cache.ByOperator)
	return err
}

// resolution is res as the stored response it becomes (nil for nil: a
// release).
func (h *Handler) resolution(res *Resolution) (*cache.Response, error) {
	if res == nil {
		return nil, nil
	}
	if err := res.Validate(); err != nil {
		return nil, err
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
	return &cache.Response{Status: res.Status, Header: hdr, Body: res.Body, BodySize: int64(len(res.Body))}, nil
}
