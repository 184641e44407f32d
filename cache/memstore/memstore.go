// Package memstore is the embedded, in-process cache.Store: sharded maps guarded by
// one mutex each, expiry enforced on every read and swept in the background, and a
// bound on records and bytes. When a bound is reached the oldest completed records
// are evicted first; an in-flight lock is never evicted (a claim that would need one
// to go fails with cache.ErrFull instead).
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
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

// entryOverhead approximates the bytes a record costs beyond its variable-length
// fields (the entry struct and its map slot); it keeps the byte bound honest for
// many small records.
const entryOverhead = 160

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

// WithMaxBytes bounds the approximate memory held by records. Default DefaultMaxBytes.
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
	shards  []shard
	seed    maphash.Seed
	now     func() time.Time
	maxRecs int64
	maxByte int64

	records atomic.Int64
	bytes   atomic.Int64
	cursor  atomic.Uint32 // round-robin start for eviction

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
	// completed entries, oldest first, for eviction.
	head, tail *entry
	// waiters by key, woken when the key's record changes.
	waiters map[string][]chan struct{}
	_       [40]byte // keep shards on separate cache lines
}

type entry struct {
	key         string
	token       string // empty once completed
	fingerprint string
	blob        []byte // encoded response, completed only
	created     int64  // unix nanoseconds
	expires     int64  // unix nanoseconds
	prev, next  *entry
	state       cache.State
}

// size is the bytes accounted for e (computed, not stored: 8 bytes per record).
func (e *entry) size() int64 {
	return entryOverhead + int64(len(e.key)+len(e.token)+len(e.fingerprint)+len(e.blob))
}

// internKey shortens the middleware's keys (64 lowercase hex digits of a SHA-256)
// to their 32 bytes behind a marker byte that no other key form produces (hex-shaped
// keys are the only ones it is applied to, and the marker makes the result 33
// bytes, a length other keys keep as they are only if they are not hex-shaped).
func internKey(k string) string {
	if len(k) != 64 {
		return k
	}
	var b [33]byte
	b[0] = 0xff
	for i := 0; i < 32; i++ {
		hi, ok1 := unhex(k[2*i])
		lo, ok2 := unhex(k[2*i+1])
		if !ok1 || !ok2 {
			return k
		}
		b[1+i] = hi<<4 | lo
	}
	return string(b[:])
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
		seed:    maphash.MakeSeed(),
		now:     c.now,
		maxRecs: c.maxRecords,
		maxByte: c.maxBytes,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
		s.shards[i].waiters = make(map[string][]chan struct{})
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

// Bytes reports the approximate bytes held by records.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

func (s *Store) shardFor(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

// LockOrGet implements cache.Store.
func (s *Store) LockOrGet(_ context.Context, key string, lock cache.Lock) (*cache.Record, bool, error) {
	key = internKey(key)
	if lock.Token == "" {
		return nil, false, fmt.Errorf("memstore: empty lock token")
	}
	now := s.now().UnixNano()
	sh := s.shardFor(key)
	sh.mu.Lock()
	if e, ok := sh.m[key]; ok {
		if e.expires > now {
			rec, err := e.record()
			sh.mu.Unlock()
			return rec, true, err
		}
		s.removeLocked(sh, e)
	}
	e := &entry{
		key:         key,
		token:       lock.Token,
		fingerprint: lock.Fingerprint,
		created:     now,
		expires:     now + int64(lock.Lease),
		state:       cache.StateInFlight,
	}
	sh.m[key] = e
	s.records.Add(1)
	s.bytes.Add(e.size())
	sh.mu.Unlock()

	if s.over() && !s.makeRoom(key) {
		// Only in-flight locks are left: refuse this claim rather than evict one.
		sh.mu.Lock()
		if cur := sh.m[key]; cur == e {
			s.removeLocked(sh, e)
		}
		sh.mu.Unlock()
		return nil, false, fmt.Errorf("memstore: claiming key: %w", cache.ErrFull)
	}
	return nil, false, nil
}

// Complete implements cache.Store.
func (s *Store) Complete(_ context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	key = internKey(key)
	if rec == nil || rec.Response == nil {
		return fmt.Errorf("memstore: completing without a response")
	}
	blob, err := cache.EncodeResponse(rec.Response)
	if err != nil {
		return err
	}
	now := s.now().UnixNano()
	sh := s.shardFor(key)
	sh.mu.Lock()
	e, err := s.heldLocked(sh, key, token, now)
	if err != nil {
		sh.mu.Unlock()
		return err
	}
	newSize := entryOverhead + int64(len(key)+len(e.fingerprint)+len(blob))
	if newSize > s.maxByte {
		sh.mu.Unlock()
		return fmt.Errorf("memstore: record of %d bytes exceeds the store's %d-byte bound: %w", newSize, s.maxByte, cache.ErrFull)
	}
	s.bytes.Add(newSize - e.size())
	e.token = ""
	e.blob = blob
	e.state = cache.StateCompleted
	e.expires = now + int64(ttl)
	sh.pushBack(e)
	sh.notifyLocked(key)
	sh.mu.Unlock()

	if s.over() {
		s.makeRoom(key)
	}
	return nil
}

// Release implements cache.Store.
func (s *Store) Release(_ context.Context, key, token string) error {
	key = internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.heldLocked(sh, key, token, now)
	if err != nil {
		return err
	}
	s.removeLocked(sh, e)
	return nil
}

// Extend implements cache.Store.
func (s *Store) Extend(_ context.Context, key, token string, lease time.Duration) error {
	key = internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.heldLocked(sh, key, token, now)
	if err != nil {
		return err
	}
	e.expires = now + int64(lease)
	return nil
}

// Get implements cache.Store.
func (s *Store) Get(_ context.Context, key string) (*cache.Record, error) {
	key = internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	if !ok {
		return nil, cache.ErrNotFound
	}
	if e.expires <= now {
		s.removeLocked(sh, e)
		return nil, cache.ErrNotFound
	}
	return e.record()
}

// Delete implements cache.Store.
func (s *Store) Delete(_ context.Context, key string) error {
	key = internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	if !ok {
		return cache.ErrNotFound
	}
	s.removeLocked(sh, e)
	if e.expires <= now {
		return cache.ErrNotFound
	}
	return nil
}

// Ping implements cache.Store; the memory store is always reachable.
func (s *Store) Ping(context.Context) error { return nil }

// heldLocked returns the live in-flight entry under key held by token.
func (s *Store) heldLocked(sh *shard, key, token string, now int64) (*entry, error) {
	e, ok := sh.m[key]
	if !ok || e.state != cache.StateInFlight || e.token != token || token == "" {
		return nil, cache.ErrLockLost
	}
	if e.expires <= now {
		s.removeLocked(sh, e)
		return nil, cache.ErrLockLost
	}
	return e, nil
}

func (s *Store) removeLocked(sh *shard, e *entry) {
	sh.notifyLocked(e.key)
	delete(sh.m, e.key)
	if e.state == cache.StateCompleted {
		sh.unlink(e)
	}
	s.records.Add(-1)
	s.bytes.Add(-e.size())
}

func (s *Store) over() bool {
	return s.records.Load() > s.maxRecs || s.bytes.Load() > s.maxByte
}

// makeRoom evicts the oldest completed records, visiting shards round-robin and
// never touching keep, until the store is within its bounds. It reports whether it
// got there. It takes one shard lock at a time.
func (s *Store) makeRoom(keep string) bool {
	n := uint32(len(s.shards))
	start := s.cursor.Add(1)
	idle := uint32(0) // consecutive shards with nothing to evict
	for i := start; s.over(); i++ {
		if idle >= n {
			return false
		}
		sh := &s.shards[i%n]
		sh.mu.Lock()
		victim := sh.head
		if victim != nil && victim.key == keep {
			victim = victim.next
		}
		if victim != nil {
			s.removeLocked(sh, victim)
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
		for _, e := range sh.m {
			if e.expires <= now {
				s.removeLocked(sh, e)
			}
		}
		sh.mu.Unlock()
	}
}

func (e *entry) record() (*cache.Record, error) {
	rec := &cache.Record{
		Version:     cache.FormatVersion,
		State:       e.state,
		Fingerprint: e.fingerprint,
		CreatedAt:   time.Unix(0, e.created),
		ExpiresAt:   time.Unix(0, e.expires),
	}
	if e.state == cache.StateCompleted {
		resp, err := cache.DecodeResponse(e.blob)
		if err != nil {
			return nil, err
		}
		rec.Response = resp
	}
	return rec, nil
}

func (sh *shard) pushBack(e *entry) {
	e.prev, e.next = sh.tail, nil
	if sh.tail != nil {
		sh.tail.next = e
	} else {
		sh.head = e
	}
	sh.tail = e
}

func (sh *shard) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else if sh.head == e {
		sh.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else if sh.tail == e {
		sh.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// Subscribe implements cache.Notifier: the channel closes when the key's record
// completes, is released, deleted, expires or is evicted.
func (s *Store) Subscribe(key string) (<-chan struct{}, func()) {
	key = internKey(key)
	ch := make(chan struct{})
	sh := s.shardFor(key)
	sh.mu.Lock()
	sh.waiters[key] = append(sh.waiters[key], ch)
	sh.mu.Unlock()
	return ch, func() {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		list := sh.waiters[key]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(sh.waiters, key)
		} else {
			sh.waiters[key] = list
		}
	}
}

func (sh *shard) notifyLocked(key string) {
	if list, ok := sh.waiters[key]; ok {
		for _, c := range list {
			close(c)
		}
		delete(sh.waiters, key)
	}
}

// InProcess implements cache.InProcess: no operation blocks on I/O.
func (s *Store) InProcess() {}
