package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// store completes the claim with resp for ttl and returns Complete's error. A
// store failure (Redis restarting) is retried in the background: the finished
// response is kept and retried for complete_retry, the lease renewed all the
// while; while the lease holds, retries get 409, and should it lapse, the lock
// is held as an unknown outcome (retries get that answer) which Complete still
// replaces, each try at most a second after the store answers again.
func (c *claim) store(resp *cache.Response, ttl time.Duration) error {
	h := c.h
	// The fingerprint and start go with the record: should the lock be gone
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
	case errors.Is(err, cache.ErrLockLost):
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
		// Outlives the request, and renews the lease until it is done.
		bg := &claim{h: h, storeKey: c.storeKey, keyHash: c.keyHash, token: c.token, renew: c.renew}
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
			msg := "idempotency record not stored within complete_retry; once its lease lapses the key is held as an unknown outcome"
			if h.lapseHold == 0 {
				msg = "idempotency record not stored within complete_retry; once its lease lapses a retry will run again"
			}
			h.logger.LogAttrs(ctx, slog.LevelError, msg, slog.String("key_hash", c.keyHash), slog.Duration("complete_retry", h.s.CompleteRetry))
			return
		}
		time.Sleep(backoff)
		sctx, cancel := h.completeCtx(ctx)
		err := h.store.Complete(sctx, c.storeKey, c.token, rec, ttl)
		cancel()
		switch {
		case err == nil:
			h.logger.LogAttrs(ctx, slog.LevelInfo, "idempotency record stored after a retry", slog.String("key_hash", c.keyHash))
			return
		case errors.Is(err, cache.ErrLockLost) && c.answeredByAnother(ctx):
			h.logger.LogAttrs(ctx, slog.LevelError, "idempotency record not stored: another request's answer holds the key",
				slog.String("key_hash", c.keyHash))
			return
		}
	}
}

// answeredByAnother reports whether the key holds another request's completed
// record, which ends a pending completion for good. Another request's in-flight
// claim does not: it may yet be refused and undone (a Redis claim no replica
// acknowledged exists on the primary until it is) or released, and by the time
// this reads the key it may be free already; nor does a failed read, nor a
// lapsed lock held as an unknown outcome (this completion's own, which it
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
		if errors.Is(err, cache.ErrLockLost) {
			level = slog.LevelWarn
		}
		h.logger.LogAttrs(c.ctx, level, "idempotency lock not released; the key stays locked until its lease lapses",
			slog.String("key_hash", c.keyHash), slog.Any("error", err))
	}
}

// undo undoes a claim whose call failed (a lost reply, a store timeout, an
// unacknowledged write): the store may have made it, and nothing is sent
// under it. Left alone, it would lapse, and its key would be held as an
// unknown outcome although this request never reached the upstream. The
// token's release is retried in the background until the store answers (it
// frees the lock, lapsed and held or not), another claim or record holds the
// key (the lock was never made, or is gone), or complete_retry passes.
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
		if errors.Is(err, cache.ErrLockLost) {
			return
		}
		if time.Until(deadline) < backoff {
			h.logger.LogAttrs(ctx, slog.LevelError, "idempotency claim whose store call failed not undone within complete_retry; should the store have made it, its key is held as an unknown outcome once its lease lapses",
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
