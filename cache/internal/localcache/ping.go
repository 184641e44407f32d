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
	if ok && sent > c.heard.Load() {
		c.heard.Store(sent)
		close(c.back) // wake the claims waiting for a ping (awaitPing)
		c.back = make(chan struct{})
	}
	c.pmu.Unlock()
	return true
}

// Ping publishes pings with publish until ctx ends: one after a claim asked
// for one (Get), at most one every pingEvery, counting a ping a store write
// carried (Carry). It counts the time the cache was not trusted while claims
// kept consulting it (Stats), at each ping.
func (c *Cache) Ping(ctx context.Context, publish func(ctx context.Context, payload string) error) {
	if c == nil {
		return
	}
	pause := time.NewTimer(pingEvery)
	pause.Stop()
	defer pause.Stop()
	last := c.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		steady := c.now()-last <= int64(Window+pingEvery) // asked again soon after the last ping: in use since
		c.pmu.Lock()
		wait := time.Duration(c.lastSent + int64(pingEvery) - c.now())
		c.pmu.Unlock()
		if wait > 0 {
			pause.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-pause.C:
			}
		}
		if !c.wanted.Load() { // a carried ping went meanwhile
			continue
		}
		now := c.now()
		if steady && !c.trusted() {
			c.untrusted.Add(now - last)
		}
		last = now
		payload := c.register(now, false)
		pctx, cancel := context.WithTimeout(ctx, Window)
		_ = publish(pctx, payload) // a lost ping only lets trust lapse
		cancel()
	}
}

// Carry returns a ping for a store write that is about to be sent (after
// Carry returns) and that publishes it on the channel as part of the write,
// at no round trip of its own; "" when none is due: one was sent less than
// pingEvery ago, or c is nil.
func (c *Cache) Carry() string {
	if c == nil {
		return ""
	}
	return c.register(c.now(), true)
}

// register records a ping sent at now and returns its payload; it answers
// the claims that asked for one. When due is set, it registers none (and
// returns "") if one was sent less than pingEvery ago.
func (c *Cache) register(now int64, due bool) string {
	c.pmu.Lock()
	if due && now-c.lastSent < int64(pingEvery) {
		c.pmu.Unlock()
		return ""
	}
	c.wanted.Store(false)
	c.seq++
	seq := c.seq
	c.sent[seq] = now
	c.lastSent = now
	for s, at := range c.sent { // pings lost or not back within Window prove nothing
		if now-at > int64(Window) {
			delete(c.sent, s)
		}
	}
	c.pmu.Unlock()
	return pingPrefix + c.id + " " + strconv.FormatUint(seq, 10)
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
