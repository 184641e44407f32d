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
//   - The cache is trusted only while its subscription is known to deliver:
//     the store publishes a ping of this cache's own on the channel, and an
//     entry is answered only while a ping sent less than Window ago has come
//     back. It pings only while claims consult the cache, at most every
//     Window/4: one ping after a claim that found no ping pending, so an idle
//     instance publishes nothing (on PostgreSQL each NOTIFY takes a
//     transaction id), and the claim that finds an idle cache is sent to the
//     store. The channel delivers in order, so a ping that
//     came back proves every change announced before it was sent has been
//     applied. A Delete or Resolve waits Window after its announcement before
//     it returns (Settle): from then on no instance answers the old record,
//     since one would need a ping sent after the announcement. A lost or
//     reconnected subscription flushes the cache (Flush), and until a new ping
//     comes back nothing is answered from it.
package localcache

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Window is how old the last ping that came back may be for the cache to be
// trusted, and how long a Delete or Resolve waits after announcing itself.
const Window = 200 * time.Millisecond

// pingEvery is how often, at most, a cache pings its channel: while claims
// keep consulting it, a ping that takes up to Window-pingEvery to come back
// keeps it trusted.
const pingEvery = Window / 4

// entryOverhead approximates an entry's memory beyond its bytes.
const entryOverhead = 256

// pingPrefix starts a ping's payload; a key announcement never does (Redis
// keys start with the store's prefix, PostgreSQL's are hex).
const pingPrefix = "\x01idemproxy-ping "

// Cache is a byte-bounded LRU of completed records. A nil *Cache caches
// nothing: every method is a no-op.
type Cache struct {
	max   int64
	id    string
	start time.Time // the base of the monotonic times below

	mu      sync.Mutex
	entries map[string]*list.Element
	lru     list.List // of *entry, most recent first
	size    int64
	reads   map[string]*pending
	gen     uint64 // bumped by Flush

	heard atomic.Int64 // when the last own ping that came back was sent (ns since start); 0: none since Flush

	wanted atomic.Bool   // a claim consulted the cache since the last ping was sent
	wake   chan struct{} // cap 1: a claim wants a ping (wanted turned true)

	pmu  sync.Mutex
	seq  uint64
	sent map[uint64]int64 // pings out: seq → when sent

	hits, misses, dropped, flushes atomic.Int64
	untrusted                      atomic.Int64 // ns the cache was not trusted, counted at each ping
}

type entry struct {
	key     string
	rec     *cache.Record
	expires int64 // ns since start
	size    int64
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
	return &Cache{max: maxBytes, id: id, start: time.Now(), entries: map[string]*list.Element{},
		reads: map[string]*pending{}, sent: map[uint64]int64{}, wake: make(chan struct{}, 1)}
}

func (c *Cache) now() int64 { return int64(time.Since(c.start)) }

// trusted reports whether a ping sent less than Window ago has come back.
func (c *Cache) trusted() bool {
	h := c.heard.Load()
	return h != 0 && c.now()-h < int64(Window)
}

// Get returns a copy of key's completed record, if the cache holds it, it has
// not expired and the cache is trusted. It asks for a ping (Ping), so that the
// cache stays trusted while it is used.
func (c *Cache) Get(key string) (*cache.Record, bool) {
	if c == nil {
		return nil, false
	}
	if !c.wanted.Load() && c.wanted.CompareAndSwap(false, true) {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	if !c.trusted() {
		return nil, false
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry)
	if now >= e.expires {
		c.remove(el)
		return nil, false
	}
	c.lru.MoveToFront(el)
	return copyRecord(e.rec), true
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
// returns is kept, unless an announcement came while it ran. A nil *Cache just
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

// Begin registers a read of key from the store, before it is sent.
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

// End ends read r, keeping rec (what it found; nil when none) when it is a
// completed record that is not an unknown outcome, with remaining life ttl by
// the store's clock, and neither its key was announced nor the cache flushed
// since r began.
func (c *Cache) End(r *Read, rec *cache.Record, ttl time.Duration) {
	if c == nil || r == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.reads[r.key]
	clean := p != nil && p.inval == r.inval && c.gen == r.gen
	if p != nil {
		if p.n--; p.n == 0 {
			delete(c.reads, r.key)
		}
	}
	if !clean || ttl <= 0 || rec == nil || rec.State != cache.StateCompleted || rec.Response == nil || rec.Response.Unknown {
		return
	}
	size := recordSize(r.key, rec)
	if size > c.max/8 { // one large response must not flush the rest
		return
	}
	if el, ok := c.entries[r.key]; ok {
		c.remove(el)
	}
	e := &entry{key: r.key, rec: copyRecord(rec), expires: r.sent + int64(ttl), size: size}
	c.entries[r.key] = c.lru.PushFront(e)
	c.size += size
	for c.size > c.max {
		c.remove(c.lru.Back())
	}
}

func (c *Cache) remove(el *list.Element) {
	e := el.Value.(*entry)
	c.lru.Remove(el)
	delete(c.entries, e.key)
	c.size -= e.size
}

// Invalidate drops key, announced as changed, and marks reads of it in flight.
func (c *Cache) Invalidate(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.remove(el)
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
	clear(c.entries)
	c.lru.Init()
	c.size = 0
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
	return len(c.entries)
}

// Stats reports the cache's use (cache.LocalCacheStats).
func (c *Cache) Stats() cache.LocalCacheStats {
	c.mu.Lock()
	n, size := len(c.entries), c.size
	c.mu.Unlock()
	return cache.LocalCacheStats{MaxBytes: c.max, Bytes: size, Records: int64(n),
		Hits: c.hits.Load(), Misses: c.misses.Load(), Invalidations: c.dropped.Load(), Flushes: c.flushes.Load(),
		Untrusted: time.Duration(c.untrusted.Load())}
}

func recordSize(key string, rec *cache.Record) int64 {
	n := entryOverhead + len(key) + len(rec.Fingerprint) + len(rec.Response.Body) + len(rec.Response.Trace)
	for _, h := range []map[string][]string{rec.Response.Header, rec.Response.Trailer} {
		for k, vs := range h {
			n += len(k) + 16
			for _, v := range vs {
				n += len(v) + 16
			}
		}
	}
	return int64(n)
}

// copyRecord is a deep copy: records returned by a store are the caller's own.
func copyRecord(r *cache.Record) *cache.Record {
	out := *r
	if r.Response != nil {
		resp := *r.Response
		resp.Header = resp.Header.Clone()
		resp.Trailer = resp.Trailer.Clone()
		resp.Body = cloneBytes(resp.Body)
		resp.Trace = cloneBytes(resp.Trace)
		out.Response = &resp
	}
	out.Trace = cloneBytes(r.Trace)
	return &out
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
