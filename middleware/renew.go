package middleware

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// renewal extends a claim's lease every third of it while next runs, and on
// while what settles the claim is stored, its background retries included: a
// lease lapses only when its instance stopped, or the store took no write for
// a whole lease. It uses a timer, not a goroutine, so fast requests pay
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
	store    bool // the claim's answer is being stored: a lost lease may be its own Complete
	running  sync.WaitGroup
}

// storing tells the renewal that the claim's answer is being stored: from
// then on, a lease found lost may be the claim's own completion, and is not
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
	rn := &renewal{h: c.h, ctx: c.ctx, storeKey: c.storeKey, token: c.token, keyHash: c.keyHash}
	rn.mu.Lock() // fire reads rn.t under mu; it may run before AfterFunc returns
	rn.t = time.AfterFunc(c.h.s.LockTTL/3, rn.fire)
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rn.ctx), min(s.StoreTimeout, s.LockTTL/3))
	err := rn.h.store.Extend(ctx, rn.storeKey, rn.token, s.LockTTL)
	cancel()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	switch {
	case errors.Is(err, cache.ErrLockLost):
		switch {
		case rn.store || rn.stopped:
			// Completed by now, or lapsed during a store outage: the
			// completion under way reports what it finds.
		case rn.h.lapseHold > 0:
			// Its Complete still replaces the held record when it lands.
			rn.h.logger.LogAttrs(rn.ctx, slog.LevelWarn, "idempotency lease lapsed while the request ran; retries get the outcome-unknown answer until its answer is stored",
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
		rn.t.Reset(s.LockTTL / 3)
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
