package middleware

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// renewal extends a claim's lease every third of it while next runs. It uses a
// timer, not a goroutine, so fast requests pay almost nothing for it.
type renewal struct {
	c       *claim
	t       *time.Timer
	mu      sync.Mutex
	stopped bool
	running sync.WaitGroup
}

func (c *claim) startRenewal() *renewal {
	rn := &renewal{c: c}
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

	c, s := rn.c, &rn.c.h.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), min(s.StoreTimeout, s.LockTTL/3))
	err := c.h.store.Extend(ctx, c.storeKey, c.token, s.LockTTL)
	cancel()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	switch {
	case errors.Is(err, cache.ErrLockLost):
		// Its Complete still lands if nobody else claims the key meanwhile.
		c.h.c.logger.LogAttrs(c.ctx, slog.LevelError, "idempotency lease lost while the request ran; a duplicate may run now",
			slog.String("key_hash", c.keyHash))
		return
	case err != nil:
		c.h.c.logger.LogAttrs(c.ctx, slog.LevelWarn, "idempotency lease not renewed; retrying",
			slog.String("key_hash", c.keyHash), slog.Any("error", err))
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
