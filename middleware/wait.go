package middleware

import (
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// waitForFirst waits, up to the configured wait, for the in-flight request holding
// c's key to finish. It returns the record as last read (loaded=true), or
// loaded=false when c claimed the key itself (the first one was released). seen
// is when the lock the caller read was created; owner is c's (Handler.owner).
//
// A store may announce only the changes of a lock that was in flight when
// Subscribe ran (PostgreSQL and Redis mark it then). A lock the read finds that
// was not the one read before Subscribe (another waiter claimed the key after a
// release, or took over a lapsed lock) may be younger than the mark: it is
// subscribed to and read once more before waiting for it.
func (c *claim) waitForFirst(r *http.Request, owner string, seen time.Time) (*cache.Record, bool, error) {
	h, key, lock := c.h, c.storeKey, c.lock(owner)
	deadline := time.NewTimer(h.s.Wait)
	defer deadline.Stop()
	notifier, _ := h.store.(cache.Notifier)
	reread := false // the last pass found a lock other than seen, and did not wait
	for {
		var changed <-chan struct{}
		cancel := func() {}
		if notifier != nil {
			changed, cancel = notifier.Subscribe(key)
		}
		// Read after subscribing: a change in between still wakes us.
		sctx, scancel := h.storeCtx(r.Context())
		rec, loaded, err := h.store.LockOrGet(sctx, key, lock)
		scancel()
		if err != nil || !loaded || rec.State != cache.StateInFlight || rec.Fingerprint != lock.Fingerprint {
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
