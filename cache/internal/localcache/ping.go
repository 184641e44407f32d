package localcache

// The pings that tell a cache its subscription delivers, and the settling of
// a Delete or Resolve.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// IsPing reports whether payload, received on the channel, is a ping (of
// this cache or another instance's) rather than a key's announcement, and
// records this cache's own.
func (c *Cache) IsPing(payload string) bool {
	rest, ok := strings.CutPrefix(payload, pingPrefix)
	if !ok {
		return false
	}
	if c == nil {
		return true
	}
	id, seqText, ok := strings.Cut(rest, " ")
	if !ok || id != c.id {
		return true
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return true
	}
	c.pmu.Lock()
	sent, ok := c.sent[seq]
	delete(c.sent, seq)
	c.pmu.Unlock()
	if ok && sent > c.heard.Load() {
		c.heard.Store(sent)
	}
	return true
}

// Ping publishes pings with publish until ctx ends: one after each claim
// that consulted the cache (Get) since the last ping was sent, at most one
// every pingEvery. It counts the time the cache was not trusted while claims
// kept consulting it (Stats), at each ping.
func (c *Cache) Ping(ctx context.Context, publish func(ctx context.Context, payload string) error) {
	pause := time.NewTimer(pingEvery)
	pause.Stop()
	defer pause.Stop()
	last := c.now()
	for {
		var steady bool // wanted again while the last ping was out: in use since
		select {
		case <-c.wake:
			steady = true
		default:
			select {
			case <-ctx.Done():
				return
			case <-c.wake:
			}
		}
		c.wanted.Store(false)
		c.pmu.Lock()
		c.seq++
		seq, now := c.seq, c.now()
		if steady && !c.trusted() {
			c.untrusted.Add(now - last)
		}
		last = now
		c.sent[seq] = now
		for s, at := range c.sent { // pings lost or not back within Window prove nothing
			if now-at > int64(Window) {
				delete(c.sent, s)
			}
		}
		c.pmu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, Window)
		_ = publish(pctx, pingPrefix+c.id+" "+strconv.FormatUint(seq, 10)) // a lost ping only lets trust lapse
		cancel()
		pause.Reset(pingEvery - time.Duration(c.now()-now))
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
	}
}

// Forget follows a Delete or Resolve that changed key and announced it: it
// drops key from c (a nil c, a store without a cache, has nothing to drop)
// and waits until every instance's cache has applied the change or stopped
// trusting itself (Settle). Every store waits, with a cache or not: another
// instance may have one. It returns ctx.Err() when ctx ends first: the change
// is made, but another instance may answer the old record until Window has
// passed.
func (c *Cache) Forget(ctx context.Context, key string) error {
	c.Invalidate(key)
	return Settle(ctx)
}

// Settle waits Window, after a Delete or Resolve announced its change, so
// that every instance has applied it or stopped trusting its cache. It
// returns ctx.Err() when ctx ends first.
func Settle(ctx context.Context) error {
	t := time.NewTimer(Window)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Unsettled is the error a store's Delete or Resolve returns when its context
// ended while it settled (Forget's err): the change is made, but not yet
// known to be applied everywhere.
func Unsettled(err error) error {
	return fmt.Errorf("changed, but not yet known to every instance's local cache (another may answer the old record for up to %v more): %w", Window, err)
}
