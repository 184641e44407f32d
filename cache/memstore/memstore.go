// Package memstore is the embedded, in-process cache.Store: shards guarded by one
// mutex each, expiry enforced on every read and swept in the background, and a
// bound on records and bytes. An in-flight claim is never evicted.
//
// # Eviction: each client its share
//
// Every record belongs to an owner, the cache.Claim's Owner (the middleware
// passes a digest of the client's scope: Host and Authorization, or the scope
// headers or function). The store counts each owner's records and bytes. When
// a claim or a completion needs room at a bound, holes and expired records go
// first; then it may evict only
//
//   - records of an owner holding more than its fair share of either bound
//     (the bound divided by the active owners, the newcomer included; never less
//     than the bound divided by 1024, however many owners there are), until that
//     owner is back at its share; and
//   - the newcomer's own records: at once while the new record would take it
//     over its share (a client pays for its own volume), else as a last resort.
//
// A record of an owner at or below its share is never evicted to make room for
// another owner. When nothing may be evicted, the store refuses the newcomer: a
// claim fails with cache.ErrFull (the middleware answers 503, even with
// fail_open), and so does a completion whose record does not fit (the middleware
// then stores the not-replayable marker instead, which always fits in place of
// its claim, so the key is still remembered as done and never runs twice).
// Owners are client-chosen: an attacker can mint as many Authorization values as
// it likes. Minting does not shrink a share below the bound over 1024, so a
// store filled by many scopes each within its share ends in refusals (503 or
// not-replayable) for newcomers until records expire, never in evicting a
// protected record. Lowering the bounds on a live store (SetBounds) is an
// operator's act: it evicts the oldest completed records, whoever owns them.
//
// # Layout
//
// In-flight locks are few (one per request running upstream) and live in an
// ordinary map per shard. Completed records, which are many, hold no Go pointers:
// each shard appends them, encoded, to a log of byte chunks and indexes them in a
// map from 128 bits of seeded hash of the key to the record's position in the
// log. The garbage collector never scans either (it sees a few large byte slices
// and a map of plain values), so a store holding millions of records costs the
// collector nothing, and a record costs about 140 bytes beyond its encoded
// response (its entry header carries 8 bytes of its owner's digest), and each
// owner holding records a row of about 50 in the owner table.
//
// The log is first in, first out: eviction takes the oldest records at its head,
// and memory comes back a chunk at a time as the head passes a chunk's end. A
// protected record at the head would pin the chunks behind it, so the store
// compacts: it copies the live records of the head's chunk to the log's tail
// (into spare room, or a chunk of exactly their size, never adding bytes) and
// frees the chunk, and the head moves on. Records evicted or expired out of order
// leave holes that count against the byte bound until the head passes them or
// their chunk, once at least half holes, is compacted (as eviction passes it, and
// at every sweep). The work one claim spends making room is bounded; past it,
// the claim is refused like one with nothing to evict, and the next one goes on
// from there.
package memstore

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/internal/waiters"
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
	// key [32] | token hash u64 | owner u64 | fingerprint | encoded response.
	entryHeader = 72
	// indexBytes is what a completed record's slot in its shard's index costs: 24
	// bytes at the map's typical load.
	indexBytes = 40
	// lockOverhead approximates an in-flight claim beyond its strings: the struct,
	// its map slot and the pointer to it.
	lockOverhead = 160
	// ownerBytes is what an owner's row in the owner table costs while it
	// holds records.
	ownerBytes = 48
	// shareFloor: an owner's fair share of each bound is the bound divided by
	// the active owners, but never less than the bound divided by shareFloor,
	// however many owners there are.
	shareFloor = 1024
	// compactBudget bounds the bytes one makeRoom call moves to the log's tail
	// (past it, the call gives up; the next one goes on from there).
	compactBudget = 64 << 10
	// scanBudget bounds the entries one makeRoom call looks at behind
	// protected records for one it may evict.
	scanBudget = 2048
	// roomAttempts bounds how often a claim or completion makes room and tries
	// again when others took the room in between.
	roomAttempts = 3
)

// Options configure a Store. The zero value is usable: defaults apply to
// zero fields.
type Options struct {
	// MaxRecords bounds the number of records (in flight and completed). 0
	// means DefaultMaxRecords.
	MaxRecords int64
	// MaxBytes bounds the memory held by records, including the index, the
	// owner table and the unreclaimed space of the record log. 0 means
	// DefaultMaxBytes.
	MaxBytes int64
	// Shards is the number of independently locked shards, at most 4096. 0
	// means DefaultShards.
	Shards int
	// SweepInterval is how often expired records are swept; negative turns
	// the sweeper off (expiry is still enforced on read). 0 means
	// DefaultSweepInterval.
	SweepInterval time.Duration
	// Now is the time source (tests inject one). nil: time.Now.
	Now func() time.Time
}

// Store is the in-memory cache.Store. Create it with New; call Close to stop its sweeper.
type Store struct {
	shards []shard
	seedA  maphash.Seed // shard choice and the index prefix's first half
	seedB  maphash.Seed // the index prefix's second half

	collideForTest bool
	now            func() time.Time
	maxRecs        atomic.Int64 // bounds: SetBounds changes them on a live store
	maxByte        atomic.Int64
	chunkSize      int

	records atomic.Int64
	bytes   atomic.Int64
	owners  owners
	jobs    jobs // reconcile jobs (reconcile.go)

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
	// locks holds the in-flight claims.
	locks map[ikey]*lock
	// index maps a completed record's key prefix to its entry's position in log.
	index map[prefix]uint64
	// log holds the completed records, oldest chunk first. Positions grow
	// monotonically: a chunk starts where the previous chunk's capacity ended.
	log []chunk
	// head is the position of the oldest entry not yet reclaimed; next is where
	// the next chunk starts.
	head, next uint64
	// ownScan: per owner, where its last look for its own records to evict
	// stopped (none of them lies before it), so the next look goes on from
	// there; hints, cleared when there are many.
	ownScan map[ownerID]uint64
	// mark: where the last sweep to look stopped (see sweepHeads).
	mark mark
	// waiters by key, woken when the key's record changes.
	waiters waiters.Registry[ikey]
	// replays counts the replays of completed records (replays.go), by
	// their index's prefix; nil until the first.
	replays map[prefix]replayCount
}

// internKey maps a store key to its ikey: 64 lowercase hex digits (what the
// middleware passes) decode to their 32 bytes; anything else is hashed.
// A collision between the two forms would need a SHA-256 preimage.
func internKey(k string) ikey {
	var out ikey
	if len(k) == 64 {
		// Table lookups without a branch a digit: every store call decodes
		// its key, twice on a replay (the claim, the replay count).
		var bad byte
		for i := range out {
			hi, lo := unhexTable[k[2*i]], unhexTable[k[2*i+1]]
			bad |= hi | lo
			out[i] = hi<<4 | lo
		}
		if bad&0xf0 == 0 {
			return out
		}
	}
	return sha256.Sum256([]byte(k))
}

// unhexTable maps a lower-case hex digit to its value and every other byte
// to 0xff.
var unhexTable = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = byte(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

var (
	_ cache.Store    = (*Store)(nil)
	_ cache.Notifier = (*Store)(nil)
)

// New returns a Store and starts its sweeper.
func New(opts Options) (*Store, error) {
	c := opts
	switch {
	case c.MaxRecords < 0:
		return nil, fmt.Errorf("memstore: max records must be at least 1 (0: the default), got %d", c.MaxRecords)
	case c.MaxBytes < 0:
		return nil, fmt.Errorf("memstore: max bytes must be at least 1 (0: the default), got %d", c.MaxBytes)
	case c.Shards < 0 || c.Shards > 4096:
		return nil, fmt.Errorf("memstore: shards must be between 1 and 4096 (0: the default), got %d", c.Shards)
	}
	c.MaxRecords = cmp.Or(c.MaxRecords, DefaultMaxRecords)
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultMaxBytes)
	c.Shards = cmp.Or(c.Shards, DefaultShards)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	if c.Now == nil {
		c.Now = time.Now
	}
	s := &Store{
		shards: make([]shard, c.Shards),
		seedA:  maphash.MakeSeed(),
		seedB:  maphash.MakeSeed(),
		now:    c.Now,
		// A partly filled chunk in every shard may cost at most an eighth of the
		// byte bound.
		chunkSize: int(min(max(c.MaxBytes/int64(c.Shards)/8, minChunk), maxChunk)),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	s.maxRecs.Store(c.MaxRecords)
	s.maxByte.Store(c.MaxBytes)
	s.owners.init()
	for i := range s.shards {
		s.shards[i].locks = make(map[ikey]*lock)
		s.shards[i].index = make(map[prefix]uint64)
		s.shards[i].ownScan = make(map[ownerID]uint64)
	}
	if c.SweepInterval > 0 {
		go s.sweepLoop(c.SweepInterval)
	} else {
		close(s.done)
	}
	return s, nil
}

// SetBounds changes the store's bounds while it runs (a configuration reload keeps
// its records): lower bounds evict the oldest completed records at once, whoever
// owns them (an operator's choice, not another client's), never an in-flight claim.
func (s *Store) SetBounds(maxRecords, maxBytes int64) error {
	if maxRecords < 1 || maxBytes < 1 {
		return fmt.Errorf("memstore: bounds must be at least 1, got %d records and %d bytes", maxRecords, maxBytes)
	}
	s.maxRecs.Store(maxRecords)
	s.maxByte.Store(maxBytes)
	if s.over() {
		s.evictOldest()
	}
	return nil
}

// Bounds returns the store's bounds: records and bytes.
func (s *Store) Bounds() (maxRecords, maxBytes int64) { return s.maxRecs.Load(), s.maxByte.Load() }

// Close stops the sweeper. The store stays usable; Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// Len reports the number of records held (live or not yet swept).
func (s *Store) Len() int64 { return s.records.Load() }

// Bytes reports the bytes held by records: locks, index slots, the owner
// table's rows and the record log's chunks (with any holes not yet reclaimed).
func (s *Store) Bytes() int64 { return s.bytes.Load() }

func (s *Store) shardFor(k *ikey) *shard {
	return &s.shards[maphash.Bytes(s.seedA, k[:])%uint64(len(s.shards))]
}
