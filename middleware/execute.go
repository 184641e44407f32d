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

// execute runs the first request under the lock and stores or releases its outcome.
func (h *Handler) execute(w http.ResponseWriter, r *http.Request, next Next, key, token, fp string, trace []byte, ev *Event) (err error) {
	started := time.Now()
	// Detach from the client: a hang-up must not cancel the work whose result the
	// client's retry will ask for. The handler timeout bounds it instead.
	ctx := context.WithoutCancel(r.Context())
	cancel := context.CancelFunc(func() {})
	if h.cfg.handlerTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, h.cfg.handlerTimeout)
	}
	defer cancel()

	renew := h.startRenewal(ctx, key, token, ev.KeyHash)
	rw := &recorder{w: w, cfg: &h.cfg}
	returned := false
	defer func() {
		if returned {
			return
		}
		p := recover() // next panicked: settle the key, then re-raise
		renew.stop()
		ev.Status = rw.status
		if p != nil {
			ev.Err = fmt.Errorf("handler panicked: %v", p)
		}
		if rw.switched() || p != nil && rw.status != 0 {
			// It panicked after it started answering (a reverse proxy aborting a
			// response cut mid-stream), or after it switched protocols: the
			// upstream may have acted.
			h.settleUnknown(ctx, rw, h.echoKey(r), key, token, fp, trace, started, ev, false)
		} else {
			h.release(ctx, key, token, ev.KeyHash)
			ev.Outcome = OutcomeNotStored
		}
		if p == nil {
			return // runtime.Goexit, not a panic: let it continue
		}
		panic(p)
	}()
	err = next.ServeHTTP(rw, r.WithContext(ctx))
	returned = true
	renew.stop()

	if rw.status == 0 && !rw.hijacked && err == nil {
		// net/http (and Caddy) send 200 for a handler that wrote nothing, with the
		// headers it set: send it now, so those headers are recorded too.
		rw.WriteHeader(http.StatusOK)
	}
	ev.Status = rw.status
	if err != nil && errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrNotSent) && !rw.hijacked {
		ev.Err = err
		if h.settleUnknown(ctx, rw, h.echoKey(r), key, token, fp, trace, started, ev, true) {
			return nil // answered: the outcome-unknown problem
		}
		return err
	}
	if rw.switched() {
		// It answered 101 or took the connection over (a request that asked to
		// upgrade is refused before it gets here, so this is the handler's own
		// doing): no answer can be stored, and it may have acted. Held, never
		// released, so its retries do not run it again.
		ev.Err = errors.Join(errSwitched, err)
		h.settleUnknown(ctx, rw, h.echoKey(r), key, token, fp, trace, started, ev, false)
		return err
	}
	if err != nil || h.cfg.inFlightOnly || !h.cfg.storeStatuses.Has(ev.Status) {
		ev.Outcome, ev.Err = OutcomeNotStored, err
		h.release(ctx, key, token, ev.KeyHash)
		return err
	}
	resp := &cache.Response{Status: ev.Status, BodySize: rw.size, Trace: trace}
	if rw.oversize {
		resp.Oversize = true
	} else {
		resp.Header, resp.Body, resp.Trailer = rw.header, rw.body, rw.trailers()
		h.unechoKey(resp.Header, r) // keyecho.go: an echoed key is not stored
	}
	// The fingerprint and start go with the record: should the lease have lapsed
	// (a store outage), Complete recreates the record on the free key.
	rec := &cache.Record{State: cache.StateCompleted, Fingerprint: fp, CreatedAt: started, Response: resp}
	cerr := h.storeRecord(ctx, key, token, rec, h.cfg.ttl, ev.KeyHash)
	if errors.Is(cerr, cache.ErrFull) && !resp.Oversize {
		// The response is larger than the store can ever hold (its bound is
		// below max_body). Remember the key as done without the response, as
		// for one above max_body: its retries get 409, never a second run.
		h.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency response too large for the store; stored as not replayable",
			slog.String("key_hash", ev.KeyHash), slog.Int("body_bytes", int(rw.size)), slog.Any("error", cerr))
		rec = &cache.Record{State: cache.StateCompleted, Fingerprint: fp, CreatedAt: started,
			Response: &cache.Response{Status: resp.Status, BodySize: resp.BodySize, Oversize: true, Trace: trace}}
		cerr = h.storeRecord(ctx, key, token, rec, h.cfg.ttl, ev.KeyHash)
	}
	ev.Outcome = OutcomeStored
	if cerr != nil {
		ev.Outcome, ev.Err = OutcomeNotStored, cerr
	}
	return nil
}

// storeRecord completes key with rec for ttl and returns Complete's error. A
// store failure (Redis restarting) is retried in the background: the finished
// response is kept and retried for complete_retry; while the lease holds,
// retries get 409, and after it lapses Complete still lands as long as nobody
// else claimed the key, each try at most a second after the store answers again.
func (h *Handler) storeRecord(ctx context.Context, key, token string, rec *cache.Record, ttl time.Duration, keyHash string) error {
	// Detached from the handler's deadline: storing must not fail because the
	// handler used its time; the store timeout bounds it instead.
	sctx, scancel := h.storeCtx(ctx)
	cerr := h.store.Complete(sctx, key, token, rec, ttl)
	scancel()
	switch {
	case cerr == nil, errors.Is(cerr, cache.ErrFull):
	case errors.Is(cerr, cache.ErrLockLost):
		h.cfg.logger.LogAttrs(ctx, slog.LevelError, "idempotency record not stored: another request claimed the key after the lease lapsed",
			slog.String("key_hash", keyHash), slog.Int("status", rec.Response.Status))
	default:
		h.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency record not stored yet; retrying in the background",
			slog.String("key_hash", keyHash), slog.Int("status", rec.Response.Status), slog.Any("error", cerr))
		h.pending.Add(1)
		release := func() {}
		if h.holder != nil {
			release = h.holder.Hold() // taken while this request still holds it
		}
		go h.completeLater(context.WithoutCancel(ctx), key, token, rec, ttl, keyHash, release)
	}
	return cerr
}

// settleUnknown settles a first execution whose outcome is unknown. Under the
// hold policy it stores the outcome-unknown problem for unknown_hold, so every
// retry gets it and nothing runs again, and answers it when nothing was written
// yet (answer); it reports whether it answered. Under the release policy it
// releases the key.
func (h *Handler) settleUnknown(ctx context.Context, rw *recorder, echo, key, token, fp string, trace []byte, started time.Time, ev *Event, answer bool) bool {
	ev.Outcome = OutcomeUnknown
	if h.cfg.unknownPolicy == UnknownRelease || h.cfg.inFlightOnly {
		h.release(ctx, key, token, ev.KeyHash)
		return false
	}
	status := unknownStatus(ev.Err)
	p := unknownProblem(status, true)
	rec := &cache.Record{State: cache.StateCompleted, Fingerprint: fp, CreatedAt: started, Response: h.unknownAnswer(status, trace)}
	h.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency outcome unknown: the key is held, retries will not run again",
		slog.String("key_hash", ev.KeyHash), slog.Duration("unknown_hold", h.cfg.unknownHold), slog.Any("error", ev.Err))
	err := h.storeRecord(ctx, key, token, rec, h.cfg.unknownHold, ev.KeyHash)
	if errors.Is(err, cache.ErrFull) {
		// A full store (a bounded memory store whose room belongs to other
		// clients) keeps a record no larger than the lock it replaces: the
		// held outcome without its rendered answer, which a replay renders.
		rec.Response = &cache.Response{Status: status, Unknown: true, Trace: trace}
		err = h.storeRecord(ctx, key, token, rec, h.cfg.unknownHold, ev.KeyHash)
	}
	if errors.Is(err, cache.ErrLockLost) || errors.Is(err, cache.ErrFull) {
		ev.Err = err
	}
	if answer && rw.status == 0 {
		h.cfg.errorFormat.write(rw, p, 0, h.cfg.keySource.name, echo)
		ev.Status = status
		return true
	}
	return false
}

// unknownAnswer is the stored answer of a held unknown outcome, in the route's
// error format: every retry gets these bytes. Every retry carries its own key
// back (the same key), filled in at replay: the key itself is never stored.
func (h *Handler) unknownAnswer(status int, trace []byte) *cache.Response {
	ct, hdr, body := h.cfg.errorFormat.render(unknownProblem(status, true), 0)
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Content-Type", ct)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set(ProblemHeader, ProblemOutcomeUnknown)
	h.markKeyEcho(hdr)
	return &cache.Response{Status: status, Unknown: true, Body: body, BodySize: int64(len(body)), Header: hdr, Trace: trace}
}

// completeLater retries Complete until it succeeds, another request's answer
// holds the key, or complete_retry passes. While another request's claim holds
// the key it keeps trying: that claim may be refused and undone, or released.
// Wait waits for it.
func (h *Handler) completeLater(ctx context.Context, key, token string, rec *cache.Record, ttl time.Duration, keyHash string, release func()) {
	defer h.pending.Done()
	defer release()
	deadline := time.Now().Add(h.cfg.completeRetry)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if time.Until(deadline) < backoff {
			h.cfg.logger.LogAttrs(ctx, slog.LevelError, "idempotency record not stored within complete_retry; once its lease lapses a retry will run again",
				slog.String("key_hash", keyHash), slog.Duration("complete_retry", h.cfg.completeRetry))
			return
		}
		time.Sleep(backoff)
		sctx, cancel := h.storeCtx(ctx)
		err := h.store.Complete(sctx, key, token, rec, ttl)
		cancel()
		switch {
		case err == nil:
			h.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "idempotency record stored after a retry", slog.String("key_hash", keyHash))
			return
		case errors.Is(err, cache.ErrLockLost) && h.answeredByAnother(ctx, key):
			h.cfg.logger.LogAttrs(ctx, slog.LevelError, "idempotency record not stored: another request claimed the key after the lease lapsed",
				slog.String("key_hash", keyHash))
			return
		}
	}
}

// answeredByAnother reports whether key holds another request's completed
// record, which ends a pending completion for good. Another request's in-flight
// claim does not: it may yet be refused and undone (a Redis claim no replica
// acknowledged exists on the primary until it is) or released, and by the time
// this reads the key it may be free already; nor does a failed read.
func (h *Handler) answeredByAnother(ctx context.Context, key string) bool {
	sctx, cancel := h.storeCtx(ctx)
	defer cancel()
	rec, err := h.store.Get(sctx, key)
	return err == nil && rec.State == cache.StateCompleted
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

func (h *Handler) release(ctx context.Context, key, token, keyHash string) {
	sctx, cancel := h.storeCtx(ctx)
	defer cancel()
	if err := h.store.Release(sctx, key, token); err != nil {
		level := slog.LevelError
		if errors.Is(err, cache.ErrLockLost) {
			level = slog.LevelWarn
		}
		h.cfg.logger.LogAttrs(ctx, level, "idempotency lock not released; the key stays locked until its lease lapses",
			slog.String("key_hash", keyHash), slog.Any("error", err))
	}
}

// renewal extends the lease every third of it while next runs. It uses a timer,
// not a goroutine, so fast requests pay almost nothing for it.
type renewal struct {
	h        *Handler
	ctx      context.Context
	key, tok string
	keyHash  string
	t        *time.Timer
	mu       sync.Mutex
	stopped  bool
	running  sync.WaitGroup
}

func (h *Handler) startRenewal(ctx context.Context, key, token, keyHash string) *renewal {
	rn := &renewal{h: h, ctx: ctx, key: key, tok: token, keyHash: keyHash}
	rn.mu.Lock() // fire reads rn.t under mu; it may run before AfterFunc returns
	rn.t = time.AfterFunc(h.cfg.lockTTL/3, rn.fire)
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

	cfg := &rn.h.cfg
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rn.ctx), min(cfg.storeTimeout, cfg.lockTTL/3))
	err := rn.h.store.Extend(ctx, rn.key, rn.tok, cfg.lockTTL)
	cancel()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	switch {
	case errors.Is(err, cache.ErrLockLost):
		// Its Complete still lands if nobody else claims the key meanwhile.
		cfg.logger.LogAttrs(rn.ctx, slog.LevelError, "idempotency lease lost while the request ran; a duplicate may run now",
			slog.String("key_hash", rn.keyHash))
		return
	case err != nil:
		cfg.logger.LogAttrs(rn.ctx, slog.LevelWarn, "idempotency lease not renewed; retrying",
			slog.String("key_hash", rn.keyHash), slog.Any("error", err))
	}
	if !rn.stopped {
		rn.t.Reset(cfg.lockTTL / 3)
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
