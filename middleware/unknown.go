package middleware

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

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
	// as it may take a request. For a lease that lapsed, it is when the key
	// was claimed, and Request and Body are the retry's that found it (the
	// same request: its fingerprint is the first execution's).
	Sent time.Time
}

// errLeaseLapsed is a held key's reason when its first execution's lease
// lapsed: the instance running it stopped (crashed, killed) or its store
// writes stopped before its outcome was stored.
var errLeaseLapsed = errors.New("the first execution's lease lapsed before its outcome was stored")

// lapsed reports a lease that lapsed, which this request found first
// (rec.Found): the key is held as an unknown outcome, and the route's
// follow-up (Settings.OnHold: reconcile) is told, with this request, which is
// the first execution's (the same fingerprint).
func (h *Handler) lapsed(r *http.Request, c *claim, key string, body []byte, rec *cache.Record) {
	h.logger.LogAttrs(r.Context(), slog.LevelWarn, "idempotency lease lapsed before the outcome was stored: the key is held, retries will not run again",
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
	h.logger.LogAttrs(c.ctx, slog.LevelWarn, "idempotency outcome unknown: the key is held, retries will not run again",
		slog.String("key_hash", c.keyHash), slog.Duration("unknown_hold", h.s.UnknownHold), slog.Any("error", c.ev.Err))
	err := c.store(h.unknownAnswer(status, c.trace), h.s.UnknownHold)
	if errors.Is(err, cache.ErrFull) {
		// A full store (a bounded memory store whose room belongs to other
		// clients) keeps a record no larger than the lock it replaces: the
		// held outcome without its rendered answer, which a replay renders.
		err = c.store(&cache.Response{Status: status, Unknown: true, Trace: c.trace}, h.s.UnknownHold)
	}
	if errors.Is(err, cache.ErrLockLost) || errors.Is(err, cache.ErrFull) {
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

// storedAnswer is the answer rec's response replays as: a held unknown
// outcome stored bare (in a full store) is rendered now, and so is a lapsed
// lease held as one.
func (h *Handler) storedAnswer(rec *cache.Record) *cache.Response {
	resp := rec.Response
	switch {
	case rec.Lapsed:
		return h.render(heldProblem(rec), resp.Trace)
	case resp.Unknown && resp.Header == nil && len(resp.Body) == 0:
		return h.unknownAnswer(resp.Status, resp.Trace)
	}
	return resp
}

// heldProblem is the problem of rec, a held unknown outcome (its response is
// Unknown): its instance's lease lapsed, or its first execution got no
// complete answer.
func heldProblem(rec *cache.Record) Problem {
	if rec.Lapsed {
		return lapsedProblem(rec.Response.Status)
	}
	return unknownProblem(rec.Response.Status, true)
}
