package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// claim is one first execution: the claim this request holds on a store key,
// from the claim to what settles it (stored, released, or held as an unknown
// outcome). Its methods are the one place that settles a claim: run, store,
// release and the claim's renewal (this file, in that order), and
// settleUnknown (unknown.go).
type claim struct {
	h        *Handler
	storeKey string        // the digest the store knows the record by (storeKey)
	keyHash  string        // storeKey's first 12 hex digits, for logs
	token    string        // fences every write after the claim
	fp       string        // the request's fingerprint
	trace    []byte        // the first execution's trace context, stored with it
	info     string        // the request and its history (cache.Info, encoded), stored with it; built on demand (requestInfo)
	owner    string        // the request's scope as cache.Claim.Owner; built on demand (ClaimOwner)
	req      *http.Request // what info and owner are built from, with path, host and seen
	path     string
	host     string
	seen     time.Time // when the request came in: its first seen
	lateSeen bool      // late marked the lapse in the history
	echo     string    // the client's key when it came in a key header; echoed on answers
	grpc     bool      // a gRPC call: the core's answers in gRPC's shape
	held     *Held     // what Settings.OnHold is told, when it is set (nil otherwise)
	started  time.Time
	// ev is how the execution ended, for the request's event: Outcome,
	// Status, Err (the tracker adopts them). It is the claim's own, not a
	// pointer to the tracker's, so both stay on the request's stack.
	ev Event
	// ctx is the execution's context: detached from the client (a hang-up
	// must not cancel the work whose result the retry will ask for), bounded
	// by handler_timeout.
	ctx context.Context
	// renew renews the claim from the claim until what settles it is stored
	// (a background retry of the store takes it over); nil once stopped.
	renew *renewal
}

// errHandlerTimeout is a first execution that handler_timeout ended: the
// handler may have acted.
var errHandlerTimeout = timeoutError("handler_timeout passed before the handler returned")

type timeoutError string

func (e timeoutError) Error() string { return string(e) }

func (e timeoutError) Timeout() bool { return true }

// claimOrGet claims c's store key, or returns the record that holds it.
func (c *claim) claimOrGet(r *http.Request, ev *Event) (*cache.Record, bool, error) {
	t0 := time.Now()
	sctx, scancel := c.h.storeCtx(r.Context())
	defer scancel()
	rec, loaded, err := c.h.store.ClaimOrGet(sctx, c.storeKey, c.asked())
	ev.StoreDuration = time.Since(t0)
	c.h.breaker.observe(c.h, err) // breaker.go: did it reach the store?
	return rec, loaded, err
}

// asked is the claim c asks the store for.
func (c *claim) asked() cache.Claim {
	h := c.h
	if !h.deferred { // a store that reads the fields themselves
		c.ClaimInfo()
		c.ClaimOwner()
	}
	return cache.Claim{Token: c.token, Fingerprint: c.fp, Duration: h.s.ClaimTTL, Trace: c.trace, Info: c.info, Owner: c.owner, Deferred: c, Hold: h.lapseHold, TTL: h.s.TTL}
}

// ClaimInfo implements cache.ClaimSource: c's request info, built once, when
// a store first asks for it (the memory store only for a new claim, so a
// replay never builds it) or the execution stores its answer.
func (c *claim) ClaimInfo() string {
	if c.info == "" && c.req != nil {
		c.info = c.h.requestInfo(c.req, c.path, c.seen)
	}
	return c.info
}

// ClaimOwner implements cache.ClaimSource: c's owner, built once, when a
// store first asks for it (the memory store only for a new claim).
func (c *claim) ClaimOwner() string {
	if c.owner == "" && c.req != nil {
		c.owner = c.h.owner(c.req, c.host)
	}
	return c.owner
}

// storeCtx returns the context for one store call: not cancelled by the client
// (an abandoned claim would hold the key for a whole claim), bounded by the store
// timeout unless the store is in-process.
func (h *Handler) storeCtx(parent context.Context) (context.Context, context.CancelFunc) {
	if h.inProcess {
		return parent, noCancel // nothing in the store waits on it
	}
	return context.WithTimeout(context.WithoutCancel(parent), h.s.StoreTimeout)
}

// completeCtx returns the context for one Complete: as storeCtx's, except on
// a store that bounds each of its requests itself (cache.RequestBounded), where
// it has no overall deadline: a large response written at the pace the store
// takes it may need longer than the store timeout, and each request is still
// bounded.
func (h *Handler) completeCtx(parent context.Context) (context.Context, context.CancelFunc) {
	if _, ok := h.store.(cache.RequestBounded); ok && !h.inProcess {
		return context.WithoutCancel(parent), noCancel
	}
	return h.storeCtx(parent)
}

func noCancel() {}

// waitForFirst waits, up to the configured wait, for the in-flight request holding
// c's key to finish. It returns the record as last read (loaded=true), or
// loaded=false when c claimed the key itself (the first one was released). seen
// is when the claim the caller read was created; owner is c's (Handler.owner).
//
// A store may announce only the changes of a claim that was in flight when
// Subscribe ran (PostgreSQL and Redis mark it then). A lock the read finds that
// was not the one read before Subscribe (another waiter claimed the key after a
// release, or took over a lapsed claim) may be younger than the mark: it is
// subscribed to and read once more before waiting for it.
func (c *claim) waitForFirst(r *http.Request, seen time.Time) (*cache.Record, bool, error) {
	h, key, want := c.h, c.storeKey, c.asked()
	deadline := time.NewTimer(h.s.Wait)
	defer deadline.Stop()
	notifier, _ := h.store.(cache.Notifier)
	reread := false // the last pass found a claim other than seen, and did not wait
	for {
		var changed <-chan struct{}
		cancel := func() {}
		if notifier != nil {
			changed, cancel = notifier.Subscribe(key)
		}
		// Read after subscribing: a change in between still wakes us.
		sctx, scancel := h.storeCtx(r.Context())
		rec, loaded, err := h.store.ClaimOrGet(sctx, key, want)
		scancel()
		h.breaker.observe(h, err)
		if err != nil || !loaded || rec.State != cache.StateInFlight || rec.Fingerprint != want.Fingerprint {
			cancel()
			return rec, loaded, err
		}
		if !rec.CreatedAt.Equal(seen) && notifier != nil && !reread {
			seen, reread = rec.CreatedAt, true
			cancel()
			continue
		}
		reread = false
		seen = rec.CreatedAt
		poll := time.NewTimer(h.s.WaitPoll)
		select {
		case <-changed:
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			cancel()
			return rec, true, nil // still in flight: 409
		case <-r.Context().Done():
			poll.Stop()
			cancel()
			return rec, true, nil // the client left
		}
		poll.Stop()
		cancel()
	}
}

// stopRenewal ends the claim's renewal, once what settles the claim is stored
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
	narrowAcceptEncoding(r.Header) // replay.go: only what a retry can be given
	if c.grpc {
		// A gRPC client's deadline would cancel the call upstream when it
		// passes, as a hang-up would: the call runs to its end instead
		// (bounded by handler_timeout), and its answer is stored for the
		// retry.
		r.Header.Del("Grpc-Timeout")
	}
	forwardable(r) // body.go
	c.ClaimInfo()  // from the request as it came, should no store have asked
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
		c.h.unechoKey(resp.Header, r) // replay.go: an echoed key is not stored
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

// store completes the claim with resp for ttl and returns Complete's error. A
// store failure (Redis restarting) is retried in the background: the finished
// response is kept and retried for complete_retry, the claim renewed all the
// while; while the claim holds, retries get 409, and should it lapse, the claim
// is held as an unknown outcome (retries get that answer) which Complete still
// replaces, each try at most a second after the store answers again.
func (c *claim) store(resp *cache.Response, ttl time.Duration) error {
	h := c.h
	if resp.Info == "" {
		resp.Info = c.ClaimInfo()
	}
	c.late(resp)
	// The fingerprint and start go with the record: should the claim be gone
	// (its hold ended during a store outage), Complete recreates the record on
	// the free key.
	rec := &cache.Record{State: cache.StateCompleted, Fingerprint: c.fp, CreatedAt: c.started, Response: resp}
	// Detached from the handler's deadline: storing must not fail because the
	// handler used its time; the store timeout bounds it instead (each of the
	// store's requests, on a store that bounds them itself).
	sctx, scancel := h.completeCtx(c.ctx)
	c.renew.storing()
	err := h.store.Complete(sctx, c.storeKey, c.token, rec, ttl)
	scancel()
	switch {
	case err == nil, errors.Is(err, cache.ErrFull):
	case errors.Is(err, cache.ErrClaimLost):
		h.logger.LogAttrs(c.ctx, slog.LevelError, "idempotency record not stored: another request's claim or answer holds the key",
			slog.String("key_hash", c.keyHash), slog.Int("status", resp.Status))
	default:
		h.logger.LogAttrs(c.ctx, slog.LevelWarn, "idempotency record not stored yet; retrying in the background",
			slog.String("key_hash", c.keyHash), slog.Int("status", resp.Status), slog.Any("error", err))
		h.pending.Add(1)
		release := func() {}
		if h.pinned != nil {
			release = h.pinned.Pin() // taken while this request still pins it
		}
		// Outlives the request, and renews the claim until it is done.
		bg := &claim{h: h, storeKey: c.storeKey, keyHash: c.keyHash, token: c.token, info: c.ClaimInfo(), renew: c.renew}
		c.renew = nil
		go bg.storeLater(context.WithoutCancel(c.ctx), rec, ttl, release)
	}
	return err
}

// storeLater retries Complete until it succeeds, another request's answer
// holds the key, or complete_retry passes. While another request's claim holds
// the key it keeps trying: that claim may be refused and undone, or released.
// Handler.Wait waits for it.
func (c *claim) storeLater(ctx context.Context, rec *cache.Record, ttl time.Duration, release func()) {
	h := c.h
	defer h.pending.Done()
	defer release()
	defer c.stopRenewal()
	deadline := time.Now().Add(h.s.CompleteRetry)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if time.Until(deadline) < backoff {
			msg := "idempotency record not stored within complete_retry; once its claim lapses the key is held as an unknown outcome"
			if h.lapseHold == 0 {
				msg = "idempotency record not stored within complete_retry; once its claim lapses a retry will run again"
			}
			h.logger.LogAttrs(ctx, slog.LevelError, msg, slog.String("key_hash", c.keyHash), slog.Duration("complete_retry", h.s.CompleteRetry))
			return
		}
		time.Sleep(backoff)
		c.late(rec.Response)
		sctx, cancel := h.completeCtx(ctx)
		err := h.store.Complete(sctx, c.storeKey, c.token, rec, ttl)
		cancel()
		switch {
		case err == nil:
			h.logger.LogAttrs(ctx, slog.LevelInfo, "idempotency record stored after a retry", slog.String("key_hash", c.keyHash))
			return
		case errors.Is(err, cache.ErrClaimLost) && c.answeredByAnother(ctx):
			h.logger.LogAttrs(ctx, slog.LevelError, "idempotency record not stored: another request's answer holds the key",
				slog.String("key_hash", c.keyHash))
			return
		}
	}
}

// late records in resp's history that the claim's lease lapsed (as far as
// its renewals know) before resp was stored, when the key is held from then
// on: the completion that lands replaces the hold.
func (c *claim) late(resp *cache.Response) {
	if c.h.lapseHold == 0 || c.lateSeen || resp.Unknown {
		return
	}
	at, lapsed := c.renew.lapsedAt()
	if !lapsed {
		return
	}
	c.lateSeen = true
	info := cache.WithEvent(resp.Info, cache.Event{Kind: cache.EventHeld, By: cache.ByLapse, At: at})
	resp.Info = cache.WithEvent(info, cache.Event{Kind: cache.EventResolved, By: cache.ByLateCompletion, At: time.Now()})
}

// answeredByAnother reports whether the key holds another request's completed
// record, which ends a pending completion for good. Another request's in-flight
// claim does not: it may yet be refused and undone (a Redis claim no replica
// acknowledged exists on the primary until it is) or released, and by the time
// this reads the key it may be free already; nor does a failed read, nor a
// lapsed claim held as an unknown outcome (this completion's own, which it
// replaces).
func (c *claim) answeredByAnother(ctx context.Context) bool {
	sctx, cancel := c.h.storeCtx(ctx)
	defer cancel()
	rec, err := c.h.store.Get(sctx, c.storeKey)
	return err == nil && rec.State == cache.StateCompleted && !rec.Lapsed
}

// release releases the claim, so a retry runs again.
func (c *claim) release() {
	c.stopRenewal()
	h := c.h
	sctx, cancel := h.storeCtx(c.ctx)
	defer cancel()
	if err := h.store.Release(sctx, c.storeKey, c.token); err != nil {
		level := slog.LevelError
		if errors.Is(err, cache.ErrClaimLost) {
			level = slog.LevelWarn
		}
		h.logger.LogAttrs(c.ctx, level, "idempotency lock not released; the key stays locked until its claim lapses",
			slog.String("key_hash", c.keyHash), slog.Any("error", err))
	}
}

// undo undoes a claim whose call failed (a lost reply, a store timeout, an
// unacknowledged write): the store may have made it, and nothing is sent
// under it. Left alone, it would lapse, and its key would be held as an
// unknown outcome although this request never reached the upstream. The
// token's release is retried in the background until the store answers (it
// frees the claim, lapsed and held or not), another claim or record holds the
// key (the claim was never made, or is gone), or complete_retry passes.
func (c *claim) undo(ctx context.Context) {
	h := c.h
	if h.inProcess {
		return // an in-process store's failed call wrote nothing
	}
	h.pending.Add(1)
	release := func() {}
	if h.pinned != nil {
		release = h.pinned.Pin()
	}
	bg := &claim{h: h, storeKey: c.storeKey, keyHash: c.keyHash, token: c.token}
	go bg.undoLater(context.WithoutCancel(ctx), release)
}

func (c *claim) undoLater(ctx context.Context, release func()) {
	h := c.h
	defer h.pending.Done()
	defer release()
	deadline := time.Now().Add(h.s.CompleteRetry)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		sctx, cancel := h.storeCtx(ctx)
		err := h.store.Release(sctx, c.storeKey, c.token)
		cancel()
		if err == nil {
			h.logger.LogAttrs(ctx, slog.LevelInfo, "idempotency claim whose store call failed undone: the key is free, nothing was sent under it",
				slog.String("key_hash", c.keyHash))
			return
		}
		if errors.Is(err, cache.ErrClaimLost) {
			return
		}
		if time.Until(deadline) < backoff {
			h.logger.LogAttrs(ctx, slog.LevelError, "idempotency claim whose store call failed not undone within complete_retry; should the store have made it, its key is held as an unknown outcome once its claim lapses",
				slog.String("key_hash", c.keyHash), slog.Any("error", err))
			return
		}
		time.Sleep(backoff)
	}
}

// Wait blocks until responses whose storing is being retried in the background
// are stored or given up, or ctx is done. Call it on shutdown, after the server
// stopped accepting requests.
func (h *Handler) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { h.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// renewal extends a claim's claim every third of it while next runs, and on
// while what settles the claim is stored, its background retries included: a
// claim lapses only when its instance stopped, or the store took no write for
// a whole claim. It uses a timer, not a goroutine, so fast requests pay
// almost nothing for it.
type renewal struct {
	h        *Handler
	ctx      context.Context
	storeKey string
	token    string
	keyHash  string
	t        *time.Timer
	mu       sync.Mutex
	stopped  bool
	store    bool      // the claim's answer is being stored: a lost lease may be its own Complete
	renewed  time.Time // when the store last took the claim's lease (claimed, or extended)
	running  sync.WaitGroup
}

// lapsedAt reports when the claim's lease lapsed, as far as its renewals
// know (the store took none for a whole lease), and whether it did.
func (rn *renewal) lapsedAt() (time.Time, bool) {
	if rn == nil {
		return time.Time{}, false
	}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	end := rn.renewed.Add(rn.h.s.ClaimTTL)
	return end, time.Now().After(end)
}

// storing tells the renewal that the claim's answer is being stored: from
// then on, a claim found lost may be the claim's own completion, and is not
// reported.
func (rn *renewal) storing() {
	if rn == nil {
		return
	}
	rn.mu.Lock()
	rn.store = true
	rn.mu.Unlock()
}

func (c *claim) startRenewal() *renewal {
	// The renewal holds copies, not the claim, which may then stay on the
	// request's stack.
	rn := &renewal{h: c.h, ctx: c.ctx, storeKey: c.storeKey, token: c.token, keyHash: c.keyHash, renewed: c.started}
	rn.mu.Lock() // fire reads rn.t under mu; it may run before AfterFunc returns
	rn.t = time.AfterFunc(c.h.s.ClaimTTL/3, rn.fire)
	rn.mu.Unlock()
	return rn
}

func (rn *renewal) fire() {
	rn.mu.Lock()
	if rn.stopped {
		rn.mu.Unlock()
		return
	}
	rn.running.Add(1)
	rn.mu.Unlock()
	defer rn.running.Done()

	s := &rn.h.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rn.ctx), min(s.StoreTimeout, s.ClaimTTL/3))
	err := rn.h.store.Extend(ctx, rn.storeKey, rn.token, s.ClaimTTL)
	cancel()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	switch {
	case err == nil:
		rn.renewed = time.Now()
	case errors.Is(err, cache.ErrClaimLost):
		switch {
		case rn.store || rn.stopped:
			// Completed by now, or lapsed during a store outage: the
			// completion under way reports what it finds.
		case rn.h.lapseHold > 0:
			// Its Complete still replaces the held record when it lands.
			rn.h.logger.LogAttrs(rn.ctx, slog.LevelWarn, "idempotency claim lapsed while the request ran; retries get the outcome-unknown answer until its answer is stored",
				slog.String("key_hash", rn.keyHash))
		default:
			// Its Complete still lands if nobody else claims the key meanwhile.
			rn.h.logger.LogAttrs(rn.ctx, slog.LevelError, "idempotency lease lost while the request ran; a duplicate may run now",
				slog.String("key_hash", rn.keyHash))
		}
		return
	case err != nil:
		rn.h.logger.LogAttrs(rn.ctx, slog.LevelWarn, "idempotency lease not renewed; retrying",
			slog.String("key_hash", rn.keyHash), slog.Any("error", err))
	}
	if !rn.stopped {
		rn.t.Reset(s.ClaimTTL / 3)
	}
}

// stop ends renewal and waits for a renewal under way.
func (rn *renewal) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.mu.Unlock()
	rn.t.Stop()
	rn.running.Wait()
}
