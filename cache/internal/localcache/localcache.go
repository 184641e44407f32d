// Package localcache keeps completed records in a process's memory for the
// shared stores (Redis, PostgreSQL), so a replay is answered without a round
// trip. It is bounded in bytes and exact about operator actions:
//
//   - Only completed records are kept; held unknown outcomes (which Resolve
//     changes) and in-flight claims never are. A completed record never changes
//     until it expires, is deleted, or (unknown outcomes only) is resolved.
//   - An entry expires when its record does: at the local time the read was
//     sent plus the record's remaining life by the store's clock, so a local
//     clock that is off changes nothing.
//   - Every change the store announces on its channel (Redis pub/sub,
//     PostgreSQL LISTEN/NOTIFY: Resolve and Delete always, Complete and Release
//     of a claim a duplicate waits for) drops the key, and marks reads of it in
//     flight so their answer is not kept. (A Complete or Release changes no
//     completed record a cache may hold, so it need not be announced.)
//   - The store puts a record in when this instance completes it (Begin
//     before the write is sent, End after it answered, as for a read), so the
//     first replay on the completing instance needs no round trip: it expires
//     at the local time the write was sent plus the TTL the store was given,
//     and an announcement of the key or a Flush while the write was out keeps
//     it out. Only a write that stored the record now is put in (a re-sent
//     Complete, whose record's life began earlier, is not).
//   - The cache is trusted only while its subscription is known to deliver:
//     the store publishes a ping of this cache's own on the channel, and an
//     entry is answered only while a ping sent less than Window ago has come
//     back. Pings cost nothing while the cache is idle, and little while it
//     is used: a claim asks for one only when the cache holds its key and the
//     last ping that came back was sent more than Window*3/4 ago; the pinger
//     sends at most one every Window/4; and a store write that is sent
//     anyway (Complete) carries one when one is due (Carry), which costs no
//     round trip (a PUBLISH or pg_notify inside the script or statement). On
//     PostgreSQL each NOTIFY sent on its own takes a transaction id. A claim
//     that finds its key held but the cache untrusted, with a ping out, waits
//     up to pingWait for it to come back (the replay right after a Complete
//     that carried one), and is otherwise sent to the store. The channel
//     delivers in order, so a ping that
//     came back proves every change announced before it was sent has been
//     applied. A Delete or Resolve waits Window after its announcement before
//     it returns (Settle): from then on no instance answers the old record,
//     since one would need a ping sent after the announcement. A lost or
//     reconnected subscription flushes the cache (Flush), and until a new ping
//     comes back nothing is answered from it.
package localcache

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Window is how old the last ping that came back may be for the cache to be
// trusted, and how long a Delete or Resolve waits after announcing itself.
const Window = 200 * time.Millisecond

// pingEvery is how often, at most, a cache pings its channel.
const pingEvery = Window / 4

// renewAfter is how old the last ping that came back may be before a claim
// of a key the cache holds asks for another: while claims keep consulting
// it, a ping that takes up to Window-renewAfter to come back keeps it
// trusted, and a busy cache sends about one ping every renewAfter.
const renewAfter = Window - pingEvery

// pingWait is how long, at most, a claim that finds its key held waits for a
// ping out to come back rather than go to the store.
const pingWait = 20 * time.Millisecond

// pingPrefix starts a ping's payload; a key announcement never does (Redis
// keys start with the store's prefix, PostgreSQL's are hex).
const pingPrefix = "\x01idemproxy-ping "

// Cache is a byte-bounded cache of completed records, the oldest kept first
// out (ring.go). A nil *Cache caches
// nothing: every method is a no-op.
type Cache struct {
	max   int64
	id    string
	start time.Time // the base of the monotonic times below

	mu    sync.Mutex
	ring  ring
	reads map[string]*pending
	gen   uint64 // bumped by Flush

	heard atomic.Int64 // when the last own ping that came back was sent (ns since start); 0: none since Flush

	wanted atomic.Bool   // a claim consulted the cache since the last ping was sent
	wake   chan struct{} // cap 1: a claim wants a ping (wanted turned true)

	pmu      sync.Mutex
	seq      uint64
	sent     map[uint64]int64 // pings out: seq → when sent
	lastSent int64            // when the last ping was sent (pmu)
	back     chan struct{}    // closed when an own ping comes back, then replaced (pmu)

	hits, misses, dropped, flushes atomic.Int64
	untrusted                      atomic.Int64 // ns the cache was not trusted, counted at each ping
}

type pending struct {
	n     int    // reads in flight
	inval uint64 // announcements of the key while reads were in flight
}

// New returns a cache of at most maxBytes, or nil (no cache) when maxBytes is
// not positive. id tells this cache's pings from other instances'.
func New(maxBytes int64, id string) *Cache {
	if maxBytes <= 0 {
		return nil
	}
	return &Cache{max: maxBytes, id: id, start: time.Now(), ring: newRing(maxBytes),
		reads: map[string]*pending{}, sent: map[uint64]int64{}, wake: make(chan struct{}, 1), back: make(chan struct{}),
		lastSent: -int64(pingEvery)}
}

func (c *Cache) now() int64 { return int64(time.Since(c.start)) }

// trusted reports whether a ping sent less than Window ago has come back.
func (c *Cache) trusted() bool {
	h := c.heard.Load()
	return h != 0 && c.now()-h < int64(Window)
}

// Get returns a copy of key's completed record, if the cache holds it, it has
// not expired and the cache is trusted. A claim for a key the cache holds asks
// for a ping when the last one that came back is older than renewAfter (Ping),
// so that the cache stays trusted while it is used; one that finds the cache
// untrusted with a ping out waits up to pingWait for it.
func (c *Cache) Get(key string) (*cache.Record, bool) {
	if c == nil {
		return nil, false
	}
	trusted := c.trusted()
	rec, held := c.lookup(key, trusted)
	if !held {
		return nil, false
	}
	if h := c.heard.Load(); h == 0 || c.now()-h >= int64(renewAfter) {
		c.want()
	}
	if trusted {
		return rec, true
	}
	if !c.awaitPing() {
		return nil, false
	}
	return c.lookup(key, true)
}

// lookup reports whether the cache holds key, live, and when answer is set
// returns a copy of its record.
func (c *Cache) lookup(key string, answer bool) (*cache.Record, bool) {
	now := c.now()
	c.mu.Lock()
	at, ok := c.ring.find(key)
	if !ok {
		c.mu.Unlock()
		return nil, false
	}
	if now >= c.ring.expires(at) {
		c.ring.drop(at)
		c.mu.Unlock()
		return nil, false
	}
	if !answer {
		c.mu.Unlock()
		return nil, true
	}
	k := c.ring.copyOut(at)
	c.mu.Unlock()
	// Decoded outside the lock; it cannot fail, since what End kept encoded
	// decodes.
	rec, ok := k.record()
	if !ok {
		c.mu.Lock()
		if at2, held := c.ring.find(key); held && at2 == at {
			c.ring.drop(at)
		}
		c.mu.Unlock()
	}
	return rec, ok
}

// want asks the pinger for a ping.
func (c *Cache) want() {
	if !c.wanted.Load() && c.wanted.CompareAndSwap(false, true) {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// awaitPing waits, while a ping sent less than Window ago is out and for at
// most pingWait, until the cache is trusted; it reports whether it is.
func (c *Cache) awaitPing() bool {
	var timer *time.Timer
	for {
		c.pmu.Lock()
		out, now := false, c.now()
		for _, at := range c.sent {
			if now-at < int64(Window) {
				out = true
				break
			}
		}
		back := c.back
		c.pmu.Unlock()
		if !out {
			return c.trusted()
		}
		if timer == nil {
			timer = time.NewTimer(pingWait)
			defer timer.Stop()
		}
		select {
		case <-back:
			if c.trusted() {
				return true
			}
		case <-timer.C:
			return c.trusted()
		}
	}
}

// Read is a read of a key from the store, begun with Begin and ended with End.
type Read struct {
	key   string
	sent  int64
	gen   uint64
	inval uint64
}

// Claim is a store's claim through the cache: a completed record the cache
// holds answers it with no round trip; otherwise claim runs (its ttl is a found
// record's remaining life by the store's clock) and a completed record it
// returns is kept, unless an announcement came while it ran. A store's
// Complete keeps the record it wrote the same way (Begin, End). A nil *Cache just
// runs claim.
func (c *Cache) Claim(key string, claim func() (*cache.Record, bool, time.Duration, error)) (*cache.Record, bool, error) {
	if rec, ok := c.Get(key); ok {
		c.hits.Add(1)
		return rec, true, nil
	}
	if c != nil {
		c.misses.Add(1)
	}
	read := c.Begin(key)
	rec, found, ttl, err := claim()
	c.End(read, rec, ttl)
	return rec, found, err
}

// Begin registers a read of key from the store, or a write of its completed
// record (Complete), before it is sent.
func (c *Cache) Begin(key string) *Read {
	if c == nil {
		return nil
	}
	r := &Read{key: key, sent: c.now()}
	c.mu.Lock()
	p := c.reads[key]
	if p == nil {
		p = &pending{}
		c.reads[key] = p
	}
	p.n++
	r.gen, r.inval = c.gen, p.inval
	c.mu.Unlock()
	return r
}

// End ends read r, keeping rec (what it found or wrote; nil when none) when it
// is a completed record that is not an unknown outcome, with remaining life
// ttl by the store's clock (for a write, the TTL the store was given), and
// neither its key was announced nor the cache flushed since r began.
func (c *Cache) End(r *Read, rec *cache.Record, ttl time.Duration) {
	if c == nil || r == nil {
		return
	}
	var blob []byte // encoded outside the lock; nil: not kept
	if ttl > 0 && rec != nil && rec.State == cache.StateCompleted && rec.Response != nil && !rec.Response.Unknown {
		blob, _ = cache.EncodeResponse(rec.Response)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.endLocked(r) && blob != nil {
		c.ring.put(r.key, rec.Fingerprint, rec.CreatedAt, rec.ExpiresAt, blob, r.expires(ttl))
	}
}

// expires is when an entry of remaining life ttl (positive), read or
// written by r, expires: r.sent plus ttl, saturated (a ttl close to
// time.Duration's largest would overflow into the past).
func (r *Read) expires(ttl time.Duration) int64 {
	if e := r.sent + int64(ttl); e >= r.sent {
		return e
	}
	return math.MaxInt64
}

// endLocked ends r and reports whether nothing changed its key while it was
// out (no announcement, no Flush): what it read or wrote may be kept.
func (c *Cache) endLocked(r *Read) bool {
	p := c.reads[r.key]
	clean := p != nil && p.inval == r.inval && c.gen == r.gen
	if p != nil {
		if p.n--; p.n == 0 {
			delete(c.reads, r.key)
		}
	}
	return clean
}

// EndEncoded is End for a completed record the caller holds encoded (a
// Complete's response, as it sent it): the record completed with fingerprint
// at created, expiring at expires, its response blob; notKept ends r keeping
// nothing (the write failed, or it stored an unknown outcome).
func (c *Cache) EndEncoded(r *Read, fingerprint string, created, expires time.Time, blob []byte, notKept bool, ttl time.Duration) {
	if c == nil || r == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.endLocked(r) && ttl > 0 && !notKept {
		c.ring.put(r.key, fingerprint, created, expires, blob, r.expires(ttl))
	}
}

// Invalidate drops key, announced as changed, and marks reads of it in flight.
func (c *Cache) Invalidate(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if at, ok := c.ring.find(key); ok {
		c.ring.drop(at)
		c.dropped.Add(1)
	}
	if p := c.reads[key]; p != nil {
		p.inval++
	}
	c.mu.Unlock()
}

// Flush drops every entry and stops trusting the cache until a ping sent
// after it comes back: the subscription broke, and announcements may be lost.
func (c *Cache) Flush() {
	if c == nil {
		return
	}
	c.flushes.Add(1)
	c.mu.Lock()
	c.heard.Store(0)
	c.gen++
	c.ring.clear()
	c.mu.Unlock()
	c.pmu.Lock()
	clear(c.sent) // pings sent before the break prove nothing after it
	c.pmu.Unlock()
}

// Len reports how many records the cache holds.
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ring.index)
}

// Stats reports the cache's use (cache.LocalCacheStats).
func (c *Cache) Stats() cache.LocalCacheStats {
	if c == nil {
		return cache.LocalCacheStats{}
	}
	c.mu.Lock()
	n, size := len(c.ring.index), c.ring.live
	c.mu.Unlock()
	return cache.LocalCacheStats{MaxBytes: c.max, Bytes: size, Records: int64(n),
		Hits: c.hits.Load(), Misses: c.misses.Load(), Invalidations: c.dropped.Load(), Flushes: c.flushes.Load(),
		Untrusted: time.Duration(c.untrusted.Load())}
}
