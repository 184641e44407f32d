// Package memstore is the embedded, in-process cache.Store: shards guarded by one
// mutex each, expiry enforced on every read and swept in the background, and a
// bound on records and bytes. When a bound is reached the oldest completed records
// are evicted first; an in-flight lock is never evicted (a claim that would need one
// to go fails with cache.ErrFull instead).
//
// # Layout
//
// In-flight locks are few (one per request running upstream) and live in an
// ordinary map per shard. Completed records, which are many, hold no Go pointers:
// each shard appends them, encoded, to a log of byte chunks and indexes them in a
// map from 128 bits of seeded hash of the key to the record's position in the
// log. The garbage collector never scans either (it sees a few large byte slices
// and a map of plain values), so a store holding millions of records costs the
// collector nothing, and a record costs about 130 bytes beyond its encoded
// response.
//
// The log is first in, first out: eviction takes the oldest record at its head,
// and memory comes back a chunk at a time as the head passes a chunk's end. A
// record deleted or expired out of order leaves a hole that is reclaimed when the
// head reaches it; holes count against the byte bound until then.
package memstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Defaults.
const (
	DefaultMaxRecords    = 1_000_000
	DefaultMaxBytes      = 512 << 20 // 512 MiB
	DefaultShards        = 64
	DefaultSweepInterval = time.Minute
)

const (
	// maxChunk and minChunk bound the size of a log chunk; a record larger than a
	// chunk gets a chunk of its own.
	maxChunk = 16 << 10
	minChunk = 512
	// A log entry: size u32 | fingerprint length u32 | created i64 | expires i64 |
	// key [32] | fingerprint | encoded response.
	entryHeader = 56
	// indexBytes is what a completed record's slot in its shard's index costs: 24
	// bytes at the map's typical load.
	indexBytes = 40
	// lockOverhead approximates an in-flight lock beyond its strings: the struct,
	// its map slot and the pointer to it.
	lockOverhead = 160
)

// Option configures a Store.
type Option func(*config)

type config struct {
	maxRecords    int64
	maxBytes      int64
	shards        int
	sweepInterval time.Duration
	now           func() time.Time
}

// WithMaxRecords bounds the number of records (in flight and completed). Default
// DefaultMaxRecords.
func WithMaxRecords(n int64) Option { return func(c *config) { c.maxRecords = n } }

// WithMaxBytes bounds the memory held by records, including the index and the
// unreclaimed space of the record log. Default DefaultMaxBytes.
func WithMaxBytes(n int64) Option { return func(c *config) { c.maxBytes = n } }

// WithShards sets the number of independently locked shards. Default DefaultShards.
func WithShards(n int) Option { return func(c *config) { c.shards = n } }

// WithSweepInterval sets how often expired records are swept; 0 or less disables the
// sweeper (expiry is still enforced on read). Default DefaultSweepInterval.
func WithSweepInterval(d time.Duration) Option { return func(c *config) { c.sweepInterval = d } }

// WithClock injects the time source (tests). Default time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// Store is the in-memory cache.Store. Create it with New; call Close to stop its sweeper.
type Store struct {
	shards []shard
	seedA  maphash.Seed // shard choice and the index prefix's first half
	seedB  maphash.Seed // the index prefix's second half

	collideForTest bool
	now            func() time.Time
	maxRecs        int64
	maxByte        int64
	chunkSize      int

	records atomic.Int64
	bytes   atomic.Int64
	cursor  atomic.Uint32 // round-robin start for eviction

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// ikey is a store key as the store keeps it: the 32 bytes of the middleware's
// 64-hex-digit keys, or the SHA-256 of any other key.
type ikey [32]byte

// prefix is what the index of completed records is keyed by: 128 bits of two
// seeded hashes of the whole key, so keys with structure (a shared leading
// part, counters) spread like random ones. The full key is in the log entry
// and checked on every lookup.
type prefix [16]byte

func (s *Store) prefixOf(k *ikey) prefix {
	var p prefix
	if s.collideForTest {
		return p // every key in one slot: exercises the full-key checks
	}
	binary.LittleEndian.PutUint64(p[:8], maphash.Bytes(s.seedA, k[:]))
	binary.LittleEndian.PutUint64(p[8:], maphash.Bytes(s.seedB, k[:]))
	return p
}

type shard struct {
	mu sync.Mutex
	// locks holds the in-flight locks.
	locks map[ikey]*lock
	// index maps a completed record's key prefix to its entry's position in log.
	index map[prefix]uint64
	// log holds the completed records, oldest chunk first. Positions grow
	// monotonically: a chunk starts where the previous chunk's capacity ended.
	log []chunk
	// head is the position of the oldest entry not yet reclaimed; next is where
	// the next chunk starts.
	head, next uint64
	// waiters by key, woken when the key's record changes.
	waiters map[ikey][]chan struct{}
}

type chunk struct {
	base uint64
	buf  []byte // len: bytes written; entries never span chunks
}

type lock struct {
	token, fingerprint string
	created, expires   int64 // unix nanoseconds
}

func (l *lock) size() int64 { return lockOverhead + int64(len(l.token)+len(l.fingerprint)) }

// internKey maps a store key to its ikey: 64 lowercase hex digits (what the
// middleware passes) decode to their 32 bytes; anything else is hashed.
// A collision between the two forms would need a SHA-256 preimage.
func internKey(k string) ikey {
	var out ikey
	if len(k) == 64 {
		ok := true
		for i := 0; i < 32 && ok; i++ {
			hi, ok1 := unhex(k[2*i])
			lo, ok2 := unhex(k[2*i+1])
			out[i] = hi<<4 | lo
			ok = ok1 && ok2
		}
		if ok {
			return out
		}
	}
	return sha256.Sum256([]byte(k))
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

var (
	_ cache.Store    = (*Store)(nil)
	_ cache.Notifier = (*Store)(nil)
)

// New returns a Store and starts its sweeper.
func New(opts ...Option) (*Store, error) {
	c := config{
		maxRecords:    DefaultMaxRecords,
		maxBytes:      DefaultMaxBytes,
		shards:        DefaultShards,
		sweepInterval: DefaultSweepInterval,
		now:           time.Now,
	}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.maxRecords < 1:
		return nil, fmt.Errorf("memstore: max records must be at least 1, got %d", c.maxRecords)
	case c.maxBytes < 1:
		return nil, fmt.Errorf("memstore: max bytes must be at least 1, got %d", c.maxBytes)
	case c.shards < 1 || c.shards > 4096:
		return nil, fmt.Errorf("memstore: shards must be between 1 and 4096, got %d", c.shards)
	case c.now == nil:
		return nil, fmt.Errorf("memstore: nil clock")
	}
	s := &Store{
		shards:  make([]shard, c.shards),
		seedA:   maphash.MakeSeed(),
		seedB:   maphash.MakeSeed(),
		now:     c.now,
		maxRecs: c.maxRecords,
		maxByte: c.maxBytes,
		// A partly filled chunk in every shard may cost at most an eighth of the
		// byte bound.
		chunkSize: int(min(max(c.maxBytes/int64(c.shards)/8, minChunk), maxChunk)),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].locks = make(map[ikey]*lock)
		s.shards[i].index = make(map[prefix]uint64)
		s.shards[i].waiters = make(map[ikey][]chan struct{})
	}
	if c.sweepInterval > 0 {
		go s.sweepLoop(c.sweepInterval)
	} else {
		close(s.done)
	}
	return s, nil
}

// Close stops the sweeper. The store stays usable; Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// Len reports the number of records held (live or not yet swept).
func (s *Store) Len() int64 { return s.records.Load() }

// Bytes reports the bytes held by records: locks, index slots and the record
// log's chunks (with any holes not yet reclaimed).
func (s *Store) Bytes() int64 { return s.bytes.Load() }

func (s *Store) shardFor(k *ikey) *shard {
	return &s.shards[maphash.Bytes(s.seedA, k[:])%uint64(len(s.shards))]
}

// LockOrGet implements cache.Store.
func (s *Store) LockOrGet(_ context.Context, key string, l cache.Lock) (*cache.Record, bool, error) {
	if l.Token == "" {
		return nil, false, fmt.Errorf("memstore: empty lock token")
	}
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	if cur, ok := sh.locks[k]; ok {
		if cur.expires > now {
			rec := cur.record()
			sh.mu.Unlock()
			return rec, true, nil
		}
		s.dropLockLocked(sh, &k, cur)
	}
	if e := s.lookupLocked(sh, &k); e != nil {
		if entryExpires(e) > now {
			sh.mu.Unlock()
			rec, err := entryRecord(e)
			return rec, true, err
		}
		s.dropIndexLocked(sh, &k)
	}
	nl := &lock{token: l.Token, fingerprint: l.Fingerprint, created: now, expires: now + int64(l.Lease)}
	sh.locks[k] = nl
	s.records.Add(1)
	s.bytes.Add(nl.size())
	sh.mu.Unlock()

	if s.over() && !s.makeRoom(&k) {
		// Only in-flight locks are left: refuse this claim rather than evict one.
		sh.mu.Lock()
		if cur := sh.locks[k]; cur == nl {
			s.dropLockLocked(sh, &k, nl)
		}
		sh.mu.Unlock()
		return nil, false, fmt.Errorf("memstore: claiming key: %w", cache.ErrFull)
	}
	return nil, false, nil
}

var encodeBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Complete implements cache.Store.
func (s *Store) Complete(_ context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	if rec == nil || rec.Response == nil {
		return fmt.Errorf("memstore: completing without a response")
	}
	buf := encodeBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 {
			encodeBufs.Put(buf)
		}
	}()
	buf.Reset()
	if err := cache.WriteResponse(buf, rec.Response); err != nil {
		return err
	}
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	l, err := s.heldLocked(sh, &k, token, now)
	if err != nil {
		sh.mu.Unlock()
		return err
	}
	n := entryHeader + len(l.fingerprint) + buf.Len()
	if need := int64(n) + indexBytes; need > s.maxByte {
		sh.mu.Unlock()
		return fmt.Errorf("memstore: record of %d bytes exceeds the store's %d-byte bound: %w", need, s.maxByte, cache.ErrFull)
	}
	if n > 1<<31 {
		sh.mu.Unlock()
		return fmt.Errorf("memstore: record of %d bytes is too large: %w", n, cache.ErrFull)
	}
	pos, e := s.appendLocked(sh, n)
	binary.LittleEndian.PutUint32(e[0:], uint32(n))
	binary.LittleEndian.PutUint32(e[4:], uint32(len(l.fingerprint)))
	binary.LittleEndian.PutUint64(e[8:], uint64(l.created))
	binary.LittleEndian.PutUint64(e[16:], uint64(now+int64(ttl)))
	copy(e[24:56], k[:])
	copy(e[entryHeader:], l.fingerprint)
	copy(e[entryHeader+len(l.fingerprint):], buf.Bytes())

	delete(sh.locks, k)
	s.bytes.Add(-l.size())
	p := s.prefixOf(&k)
	if _, taken := sh.index[p]; taken {
		// Another key with the same 128-bit prefix (never seen in practice): its
		// record becomes a hole; this one takes the slot.
		s.records.Add(-1)
		s.bytes.Add(-indexBytes)
	}
	sh.index[p] = pos
	s.bytes.Add(indexBytes)
	sh.notifyLocked(&k)
	sh.mu.Unlock()

	if s.over() {
		s.makeRoom(&k)
	}
	return nil
}

// Release implements cache.Store.
func (s *Store) Release(_ context.Context, key, token string) error {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l, err := s.heldLocked(sh, &k, token, now)
	if err != nil {
		return err
	}
	s.dropLockLocked(sh, &k, l)
	return nil
}

// Extend implements cache.Store.
func (s *Store) Extend(_ context.Context, key, token string, lease time.Duration) error {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l, err := s.heldLocked(sh, &k, token, now)
	if err != nil {
		return err
	}
	l.expires = now + int64(lease)
	return nil
}

// Get implements cache.Store.
func (s *Store) Get(_ context.Context, key string) (*cache.Record, error) {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	if l, ok := sh.locks[k]; ok {
		if l.expires > now {
			rec := l.record()
			sh.mu.Unlock()
			return rec, nil
		}
		s.dropLockLocked(sh, &k, l)
	}
	e := s.lookupLocked(sh, &k)
	if e == nil {
		sh.mu.Unlock()
		return nil, cache.ErrNotFound
	}
	if entryExpires(e) <= now {
		s.dropIndexLocked(sh, &k)
		sh.mu.Unlock()
		return nil, cache.ErrNotFound
	}
	sh.mu.Unlock()
	return entryRecord(e)
}

// Delete implements cache.Store.
func (s *Store) Delete(_ context.Context, key string) error {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if l, ok := sh.locks[k]; ok {
		s.dropLockLocked(sh, &k, l)
		if l.expires <= now {
			return cache.ErrNotFound
		}
		return nil
	}
	e := s.lookupLocked(sh, &k)
	if e == nil {
		return cache.ErrNotFound
	}
	s.dropIndexLocked(sh, &k)
	if entryExpires(e) <= now {
		return cache.ErrNotFound
	}
	return nil
}

// Ping implements cache.Store; the memory store is always reachable.
func (s *Store) Ping(context.Context) error { return nil }

// heldLocked returns the live lock under k held by token.
func (s *Store) heldLocked(sh *shard, k *ikey, token string, now int64) (*lock, error) {
	l, ok := sh.locks[*k]
	if !ok || l.token != token || token == "" {
		return nil, cache.ErrLockLost
	}
	if l.expires <= now {
		s.dropLockLocked(sh, k, l)
		return nil, cache.ErrLockLost
	}
	return l, nil
}

func (s *Store) dropLockLocked(sh *shard, k *ikey, l *lock) {
	sh.notifyLocked(k)
	delete(sh.locks, *k)
	s.records.Add(-1)
	s.bytes.Add(-l.size())
}

// dropIndexLocked forgets k's completed record; its entry becomes a hole in
// the log, reclaimed when the head passes it.
func (s *Store) dropIndexLocked(sh *shard, k *ikey) {
	sh.notifyLocked(k)
	delete(sh.index, s.prefixOf(k))
	s.records.Add(-1)
	s.bytes.Add(-indexBytes)
}

// lookupLocked returns the log entry of k's completed record, or nil.
func (s *Store) lookupLocked(sh *shard, k *ikey) []byte {
	pos, ok := sh.index[s.prefixOf(k)]
	if !ok {
		return nil
	}
	e := sh.entryAt(pos)
	if !bytes.Equal(e[24:56], k[:]) {
		return nil // another key with the same prefix
	}
	return e
}

// entryAt returns the entry at pos, which must be a position in the log.
func (sh *shard) entryAt(pos uint64) []byte {
	i := sort.Search(len(sh.log), func(i int) bool { return sh.log[i].base > pos }) - 1
	c := &sh.log[i]
	off := pos - c.base
	n := binary.LittleEndian.Uint32(c.buf[off:])
	return c.buf[off : off+uint64(n) : off+uint64(n)]
}

// appendLocked reserves n bytes at the end of sh's log and returns their position.
func (s *Store) appendLocked(sh *shard, n int) (uint64, []byte) {
	if len(sh.log) > 0 {
		c := &sh.log[len(sh.log)-1]
		if used := len(c.buf); cap(c.buf)-used >= n {
			c.buf = c.buf[:used+n]
			return c.base + uint64(used), c.buf[used : used+n]
		}
	}
	size := max(s.chunkSize, n)
	c := chunk{base: sh.next, buf: make([]byte, n, size)}
	if len(sh.log) == 0 {
		sh.head = c.base
	}
	sh.next += uint64(size)
	sh.log = append(sh.log, c)
	s.bytes.Add(int64(size))
	return c.base, c.buf
}

// popHeadLocked reclaims the entry at the head of sh's log, evicting its record
// if it is still indexed there, unless it is keep's record. It reports whether
// it reclaimed anything.
func (s *Store) popHeadLocked(sh *shard, keep *ikey) bool {
	if len(sh.log) == 0 {
		return false
	}
	c := &sh.log[0]
	off := sh.head - c.base
	e := c.buf[off:]
	n := binary.LittleEndian.Uint32(e)
	var k ikey
	copy(k[:], e[24:56])
	if pos, ok := sh.index[s.prefixOf(&k)]; ok && pos == sh.head {
		if keep != nil && k == *keep {
			return false
		}
		s.dropIndexLocked(sh, &k)
	}
	sh.head += uint64(n)
	s.trimLocked(sh)
	return true
}

// trimLocked drops the chunks the head has passed.
func (s *Store) trimLocked(sh *shard) {
	for len(sh.log) > 0 {
		c := &sh.log[0]
		if sh.head < c.base+uint64(len(c.buf)) {
			return
		}
		s.bytes.Add(-int64(cap(c.buf)))
		sh.log[0] = chunk{}
		sh.log = sh.log[1:]
		if len(sh.log) > 0 {
			sh.head = sh.log[0].base
		} else {
			sh.log = nil
		}
	}
}

// reclaimDeadLocked pops head entries that are holes or expired.
func (s *Store) reclaimDeadLocked(sh *shard, now int64) {
	for len(sh.log) > 0 {
		e := sh.entryAt(sh.head)
		if pos, ok := sh.index[s.prefixOf((*ikey)(e[24:56]))]; ok && pos == sh.head && entryExpires(e) > now {
			return
		}
		s.popHeadLocked(sh, nil)
	}
}

func (s *Store) over() bool {
	return s.records.Load() > s.maxRecs || s.bytes.Load() > s.maxByte
}

// makeRoom evicts the oldest completed records, visiting shards round-robin and
// never touching keep's record, until the store is within its bounds. It reports
// whether it got there. It takes one shard lock at a time.
func (s *Store) makeRoom(keep *ikey) bool {
	n := uint32(len(s.shards))
	start := s.cursor.Add(1)
	idle := uint32(0) // consecutive shards with nothing to reclaim
	for i := start; s.over(); i++ {
		if idle >= n {
			return false
		}
		sh := &s.shards[i%n]
		sh.mu.Lock()
		if s.popHeadLocked(sh, keep) {
			idle = 0
		} else {
			idle++
		}
		sh.mu.Unlock()
	}
	return true
}

func (s *Store) sweepLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep removes every expired record now. The background sweeper calls it; it is
// exported for operators and tests.
func (s *Store) Sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		now := s.now().UnixNano()
		sh.mu.Lock()
		for k, l := range sh.locks {
			if l.expires <= now {
				s.dropLockLocked(sh, &k, l)
			}
		}
		for _, pos := range sh.index {
			if e := sh.entryAt(pos); entryExpires(e) <= now {
				var k ikey
				copy(k[:], e[24:56])
				s.dropIndexLocked(sh, &k)
			}
		}
		s.reclaimDeadLocked(sh, now)
		sh.mu.Unlock()
	}
}

func entryExpires(e []byte) int64 { return int64(binary.LittleEndian.Uint64(e[16:])) }

// entryRecord decodes a log entry. Entries are never written again once
// appended and chunks are never reused, so this runs without the shard lock.
func entryRecord(e []byte) (*cache.Record, error) {
	fpLen := binary.LittleEndian.Uint32(e[4:])
	if entryHeader+uint64(fpLen) > uint64(len(e)) {
		return nil, fmt.Errorf("memstore: %w: entry of %d bytes with a %d-byte fingerprint", cache.ErrCorrupt, len(e), fpLen)
	}
	resp, err := cache.DecodeResponse(e[entryHeader+fpLen:])
	if err != nil {
		return nil, err
	}
	return &cache.Record{
		Version:     cache.FormatVersion,
		State:       cache.StateCompleted,
		Fingerprint: string(e[entryHeader : entryHeader+fpLen]),
		CreatedAt:   time.Unix(0, int64(binary.LittleEndian.Uint64(e[8:]))),
		ExpiresAt:   time.Unix(0, entryExpires(e)),
		Response:    resp,
	}, nil
}

func (l *lock) record() *cache.Record {
	return &cache.Record{
		Version:     cache.FormatVersion,
		State:       cache.StateInFlight,
		Fingerprint: l.fingerprint,
		CreatedAt:   time.Unix(0, l.created),
		ExpiresAt:   time.Unix(0, l.expires),
	}
}

// Subscribe implements cache.Notifier: the channel closes when the key's record
// completes, is released, deleted, expires or is evicted.
func (s *Store) Subscribe(key string) (<-chan struct{}, func()) {
	k := internKey(key)
	ch := make(chan struct{})
	sh := s.shardFor(&k)
	sh.mu.Lock()
	sh.waiters[k] = append(sh.waiters[k], ch)
	sh.mu.Unlock()
	return ch, func() {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		list := sh.waiters[k]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(sh.waiters, k)
		} else {
			sh.waiters[k] = list
		}
	}
}

func (sh *shard) notifyLocked(k *ikey) {
	if len(sh.waiters) == 0 {
		return
	}
	if list, ok := sh.waiters[*k]; ok {
		for _, c := range list {
			close(c)
		}
		delete(sh.waiters, *k)
	}
}

// InProcess implements cache.InProcess: no operation blocks on I/O.
func (s *Store) InProcess() {}
