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

// claim is one first execution: the lease this request holds on a store key,
// from the claim to what settles it (stored, released, or held as an unknown
// outcome). Its methods are the one place that settles a claim: run (this
// file), store and release (complete.go), settleUnknown (unknown.go), and the
// lease's renewal (renew.go).
type claim struct {
	h        *Handler
	storeKey string // the digest the store knows the record by (storeKey)
	keyHash  string // storeKey's first 12 hex digits, for logs
	token    string // fences every write after the claim
	fp       string // the request's fingerprint
	trace    []byte // the first execution's trace context, stored with it
	echo     string // the client's key when it came in a key header; echoed on answers
	grpc     bool   // a gRPC call: the core's answers in gRPC's shape
	held     *Held  // what Settings.OnHold is told, when it is set (nil otherwise)
	started  time.Time
	// ev is how the execution ended, for the request's event: Outcome,
	// Status, Err (the tracker adopts them). It is the claim's own, not a
	// pointer to the tracker's, so both stay on the request's stack.
	ev Event
	// ctx is the execution's context: detached from the client (a hang-up
	// must not cancel the work whose result the retry will ask for), bounded
	// by handler_timeout.
	ctx context.Context
	// renew renews the lease from the claim until what settles it is stored
	// (a background retry of the store takes it over); nil once stopped.
	renew *renewal
}

// errHandlerTimeout is a first execution that handler_timeout ended: the
// handler may have acted.
var errHandlerTimeout = timeoutError("handler_timeout passed before the handler returned")

type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (e timeoutError) Timeout() bool { return true }

// lockOrGet claims c's store key, or returns the record that holds it.
func (c *claim) lockOrGet(r *http.Request, owner string, ev *Event) (*cache.Record, bool, error) {
	t0 := time.Now()
	sctx, scancel := c.h.storeCtx(r.Context())
	defer scancel()
	rec, loaded, err := c.h.store.LockOrGet(sctx, c.storeKey, c.lock(owner))
	ev.StoreDuration = time.Since(t0)
	return rec, loaded, err
}

// lock is what c asks the store for.
func (c *claim) lock(owner string) cache.Lock {
	h := c.h
	return cache.Lock{Token: c.token, Fingerprint: c.fp, Lease: h.s.LockTTL, Trace: c.trace, Owner: owner, Hold: h.lapseHold, TTL: h.s.TTL}
}

// stopRenewal ends the lease's renewal, once what settles the claim is stored
// (or given up) or the key is released.
func (c *claim) stopRenewal() {
	if c.renew != nil {
		c.renew.stop()
		c.renew = nil
	}
}

// run runs next under the claim and settles it: it stores the response, or
// releases the key, or holds it as an unknown outcome. It returns next's error
// when the core did not answer.
func (c *claim) run(w http.ResponseWriter, r *http.Request, next Next) (err error) {
	h := c.h
	c.started = time.Now()
	ctx, cancel := context.WithValue(context.WithoutCancel(r.Context()), runningKey{}, outcomeFirst), context.CancelFunc(func() {})
	late, _ := r.Body.(*lateBody) // a gRPC call forwarded before its end (grpcbody.go)
	switch {
	case late != nil:
		// It may turn out a stream: then handler_timeout no longer bounds it,
		// and its client's hang-up ends it upstream, as any stream's does.
		ctx, cancel = context.WithCancel(ctx)
		var bound *time.Timer
		if h.s.HandlerTimeout > 0 {
			bound = time.AfterFunc(h.s.HandlerTimeout, cancel)
		}
		client := r.Context()
		late.onStream = func() {
			if bound != nil {
				bound.Stop()
			}
			context.AfterFunc(client, cancel)
		}
	case h.s.HandlerTimeout > 0:
		ctx, cancel = context.WithTimeout(ctx, h.s.HandlerTimeout)
	}
	defer cancel()
	c.ctx = ctx

	c.renew = c.startRenewal()
	rw := &recorder{w: w, client: progressWriter{w: w, timeout: h.s.BodyReadTimeout}, ignored: h.ignored, maxBody: h.s.MaxBody}
	returned := false
	defer func() {
		if returned {
			return
		}
		p := recover() // next panicked: settle the key, then re-raise
		c.ev.Status = rw.status
		if p != nil {
			c.ev.Err = fmt.Errorf("handler panicked: %v", p)
		}
		if late != nil && late.stream() {
			c.release() // a stream: nothing to store
			c.ev.Outcome, c.ev.Err = OutcomeBypass, errors.Join(errStream, c.ev.Err)
		} else if rw.switched() || p != nil && rw.status != 0 {
			// It panicked after it started answering (a reverse proxy aborting a
			// response cut mid-stream), or after it switched protocols: the
			// upstream may have acted.
			c.settleUnknown(rw, false)
		} else {
			c.release()
			c.ev.Outcome = OutcomeNotStored
		}
		c.stopRenewal()
		if p == nil {
			return // runtime.Goexit, not a panic: let it continue
		}
		panic(p)
	}()
	defer func() { // after the answer is stored: a slow client cannot delay it
		if returned && rw.clientErr == nil && !rw.switched() {
			rw.client.finish()
		}
	}()
	narrowAcceptEncoding(r.Header) // encoding.go: only what a retry can be given
	if c.grpc {
		// A gRPC client's deadline would cancel the call upstream when it
		// passes, as a hang-up would: the call runs to its end instead
		// (bounded by handler_timeout), and its answer is stored for the
		// retry.
		r.Header.Del("Grpc-Timeout")
	}
	err = next.ServeHTTP(rw, r.WithContext(ctx))
	returned = true
	// The lease is renewed on until what settles the claim is stored.
	defer c.stopRenewal()

	if late != nil && late.stream() {
		// Whole messages followed the first: a client stream, which has no
		// one answer to store. Its key is released, as any stream's is
		// never taken.
		c.ev.Status, c.ev.Outcome, c.ev.Err = rw.status, OutcomeBypass, errors.Join(errStream, err)
		c.release()
		return err
	}
	if ctx.Err() != nil && h.s.HandlerTimeout > 0 {
		// The core's own deadline: whatever the handler did, it may have
		// acted, and what it wrote (or left unwritten) is not its answer.
		c.ev.Status, c.ev.Err = rw.status, errors.Join(errHandlerTimeout, err)
		if c.settleUnknown(rw, !rw.hijacked && !rw.switched()) {
			return nil // answered: the outcome-unknown problem
		}
		if rw.status == 0 && !rw.hijacked {
			h.writeProblem(rw, unknownProblem(http.StatusGatewayTimeout, false), 0, c.echo, c.grpc) // released by policy
			c.ev.Status = http.StatusGatewayTimeout
		}
		return nil
	}
	if rw.status == 0 && !rw.hijacked && err == nil {
		// net/http (and Caddy) send 200 for a handler that wrote nothing, with the
		// headers it set: send it now, so those headers are recorded too.
		rw.WriteHeader(http.StatusOK)
	}
	c.ev.Status = rw.status
	switch {
	case err != nil && errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrNotSent) && !rw.hijacked:
		c.ev.Err = err
		if c.settleUnknown(rw, true) {
			return nil // answered: the outcome-unknown problem
		}
		return err
	case rw.switched():
		// It answered 101 or took the connection over (a request that asked to
		// upgrade is refused before it gets here, so this is the handler's own
		// doing): no answer can be stored, and it may have acted. Held, never
		// released, so its retries do not run it again.
		c.ev.Err = errors.Join(errSwitched, err)
		c.settleUnknown(rw, false)
		return err
	case err != nil || h.s.InFlightOnly || !h.s.StoreStatuses.Has(rw.storeStatus()): // grpc.go: a gRPC answer's grpc-status
		c.ev.Outcome, c.ev.Err = OutcomeNotStored, err
		c.release()
		return err
	}
	c.storeResponse(r, rw)
	return nil
}

// storeResponse completes the claim with the recorded response.
func (c *claim) storeResponse(r *http.Request, rw *recorder) {
	resp := &cache.Response{Status: c.ev.Status, BodySize: rw.size, Trace: c.trace}
	if rw.oversize {
		resp.Oversize = true
	} else {
		resp.Header, resp.Body, resp.Trailer = rw.header, rw.body, rw.trailers()
		c.h.unechoKey(resp.Header, r) // keyecho.go: an echoed key is not stored
	}
	err := c.store(resp, c.h.s.TTL)
	if errors.Is(err, cache.ErrFull) && !resp.Oversize {
		// The response is larger than the store can hold (its bound is below
		// max_body, or the room is other clients'). Remember the key as done
		// without the response, as for one above max_body: its retries get
		// 409, never a second run.
		c.h.logger.LogAttrs(c.ctx, slog.LevelWarn, "idempotency response too large for the store; stored as not replayable",
			slog.String("key_hash", c.keyHash), slog.Int("body_bytes", int(rw.size)), slog.Any("error", err))
		err = c.store(&cache.Response{Status: resp.Status, BodySize: resp.BodySize, Oversize: true, Trace: c.trace}, c.h.s.TTL)
	}
	c.ev.Outcome = OutcomeStored
	if err != nil {
		c.ev.Outcome, c.ev.Err = OutcomeNotStored, err
	}
}
