package memstore

import (
	"sync/atomic"
	"time"
)

// reclaimDeadLocked pops head entries that are holes or expired.
func (s *Store) reclaimDeadLocked(sh *shard, now int64) {
	for len(sh.log) > 0 {
		e := sh.entryAt(sh.head)
		if s.indexedAt(sh, sh.head, e) {
			if e.expires() > now {
				return
			}
			s.dropIndexLocked(sh, e)
		}
		s.popHeadLocked(sh, e)
	}
}

func (s *Store) over() bool {
	return s.records.Load() > s.maxRecs.Load() || s.bytes.Load() > s.maxByte.Load()
}

// tryReserve adds records and bytes to the store's counts if both stay within
// the bounds, and reports whether it did (a change that does not grow a count
// is always made). Growth is reserved this way, before it is written, so
// concurrent writers cannot together pass a bound.
func (s *Store) tryReserve(records, bytes int64) bool {
	if !reserve(&s.records, records, s.maxRecs.Load()) {
		return false
	}
	if !reserve(&s.bytes, bytes, s.maxByte.Load()) {
		s.records.Add(-records)
		return false
	}
	return true
}

// reservation is room a writer reserved and has not used yet.
type reservation struct{ records, bytes int64 }

// topUp makes r hold records and bytes, reserving the difference, and
// reports whether it could.
func (s *Store) topUp(r *reservation, records, bytes int64) bool {
	if !s.tryReserve(records-r.records, bytes-r.bytes) {
		return false
	}
	r.records, r.bytes = records, bytes
	return true
}

// grow makes room, within owner's policy, for r to hold records and bytes
// (growth: what owner's usage grows by), and reports whether r holds them.
func (s *Store) grow(r *reservation, owner ownerID, records, bytes, growth int64, keep *ikey) bool {
	if !s.makeRoom(owner, records-r.records, bytes-r.bytes, growth, keep) {
		return false
	}
	r.records, r.bytes = records, bytes
	return true
}

// release gives back what r holds.
func (s *Store) release(r *reservation) {
	s.records.Add(-r.records)
	s.bytes.Add(-r.bytes)
	*r = reservation{}
}

// reserve adds n to v if n is not positive or the sum stays at most bound.
func reserve(v *atomic.Int64, n, bound int64) bool {
	if n <= 0 {
		v.Add(n)
		return true
	}
	for {
		cur := v.Load()
		if cur+n > bound {
			return false
		}
		if v.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// policy is what one makeRoom call may evict.
//
// A completed record is evictable when it has expired, or when its owner holds
// more than its fair share of either bound (the bound divided by the active
// owners, the one the room is for included, and never less than the bound
// divided by shareFloor): a client over its share pays for its own volume.
// The owner the room is for may evict its own records: at once while the room
// would take it over its share, and otherwise as the last resort, when no
// other owner's record could go. Any other record is protected: never
// evicted, it is moved to the log's tail when it holds up the head.
type policy struct {
	any        bool // every completed record (a lowered bound): oldest first
	owner      ownerID
	lastResort bool  // the owner's own records, whatever its share
	keep       *ikey // never evicted (a record being resolved)
	now        int64
	budget     int64 // bytes compaction may still move

	records, bytes int64 // the room asked for
	growth         int64 // what the owner's usage grows by with it

	shareRecords, shareBytes int64
}

// shares sets the fair shares from the active owners.
func (p *policy) shares(s *Store) {
	active := s.owners.active.Load()
	if s.owners.get(p.owner).records == 0 {
		active++ // the owner the room is for, about to hold a record
	}
	active = max(active, 1)
	maxR, maxB := s.maxRecs.Load(), s.maxByte.Load()
	p.shareRecords = max(maxR/active, maxR/shareFloor)
	p.shareBytes = max(maxB/active, maxB/shareFloor)
}

// evictable reports whether the live record e may go.
func (s *Store) evictable(p *policy, e entry) bool {
	switch {
	case p.keep != nil && e.isKey(p.keep):
		return false
	case p.any:
		return true
	}
	id := e.owner()
	u := s.owners.get(id)
	if id == p.owner {
		return p.lastResort || u.records+p.records > p.shareRecords || u.bytes+p.growth > p.shareBytes
	}
	return u.records > p.shareRecords || u.bytes > p.shareBytes
}

// makeRoom evicts, within owner's policy, until it can reserve records and
// bytes more (see tryReserve), and reports whether it reserved them; growth is
// what owner's usage will grow by. Expired records and holes at the heads of
// the logs go first, then evictable records, oldest first; a protected record
// at a head is moved to its log's tail with the rest of its chunk
// (compaction), so the head keeps moving and the space behind it can come
// back. It takes one shard lock at a time.
func (s *Store) makeRoom(owner ownerID, records, bytes, growth int64, keep *ikey) bool {
	reserve := func() bool { return s.tryReserve(records, bytes) }
	if reserve() {
		return true
	}
	p := policy{owner: owner, keep: keep, now: s.now().UnixNano(), budget: compactBudget, records: records, bytes: bytes, growth: growth}
	if s.sweepHeads(&p, reserve) {
		return true
	}
	p.lastResort = true
	return s.sweepHeads(&p, reserve)
}

// evictOldest evicts the oldest completed records, whoever owns them, until
// the store is within its bounds (a lowered bound). It never evicts a lock.
func (s *Store) evictOldest() {
	p := policy{any: true, now: s.now().UnixNano()}
	s.sweepHeads(&p, func() bool { return !s.over() })
}

// sweepHeads visits the shards round-robin, one step each, until done reports
// true or no shard can make any more room, and reports whether done did.
func (s *Store) sweepHeads(p *policy, done func() bool) bool {
	n := uint32(len(s.shards))
	var stops []uint64 // per shard: where compaction stops (what it moved lies past it)
	start := s.cursor.Add(1)
	idle := uint32(0) // consecutive shards with no room to give
	for i := start; !done(); i++ {
		if idle >= n {
			return false
		}
		j := i % n
		sh := &s.shards[j]
		sh.mu.Lock()
		p.shares(s)
		progress := s.stepLocked(sh, p)
		if !progress && p.budget > 0 && len(sh.log) > 0 {
			if stops == nil {
				stops = make([]uint64, n)
				for k := range stops {
					stops[k] = ^uint64(0)
				}
			}
			if stops[j] == ^uint64(0) {
				stops[j] = sh.end()
			}
			if sh.head < stops[j] {
				progress = s.compactHeadLocked(sh, p)
			}
		}
		sh.mu.Unlock()
		if progress {
			idle = 0
		} else {
			idle++
		}
	}
	return true
}

// stepLocked reclaims the entry at sh's head if it is a hole, expired or
// evictable, and reports whether it did.
func (s *Store) stepLocked(sh *shard, p *policy) bool {
	if len(sh.log) == 0 {
		return false
	}
	e := sh.entryAt(sh.head)
	if s.indexedAt(sh, sh.head, e) {
		if e.expires() > p.now && !s.evictable(p, e) {
			return false
		}
		s.dropIndexLocked(sh, e)
	}
	s.popHeadLocked(sh, e)
	return true
}

// compactHeadLocked frees the chunk at sh's head, whose first entry is a
// protected record. The expired and evictable records in it are dropped (the
// owner's own records as a last resort only until the room asked for will be
// there); the others are copied to the log's tail, into the last chunk if they
// fit, else into a new chunk of exactly their size, and re-indexed there. So
// the byte count never grows, and records keep their order among themselves
// (though they now come after records written since). It reports whether it
// did anything: the log's only chunk, full of protected records, has nothing
// to win.
func (s *Store) compactHeadLocked(sh *shard, p *policy) bool {
	c0 := sh.log[0] // a copy: appending may move the log's slice
	end := c0.base + uint64(len(c0.buf))
	live, dropped := 0, false
	for pos := sh.head; pos < end; {
		e := c0.entryAt(pos)
		if s.indexedAt(sh, pos, e) {
			if e.expires() <= p.now {
				s.dropIndexLocked(sh, e)
				dropped = true
			} else {
				live += len(e)
			}
		}
		pos += uint64(len(e))
	}
	// place is what moving n bytes to the tail costs: nothing in the last
	// chunk's spare room, else a chunk of exactly n.
	place := func(n int) int {
		if n == 0 || len(sh.log) > 1 && s.newChunkFor(sh, n) == 0 {
			return 0
		}
		return n
	}
	fitsAfter := func() bool {
		return s.records.Load()+p.records <= s.maxRecs.Load() &&
			s.bytes.Load()-int64(cap(c0.buf))+int64(place(live))+p.bytes <= s.maxByte.Load()
	}
	for pos := sh.head; pos < end; {
		e := c0.entryAt(pos)
		if s.indexedAt(sh, pos, e) && s.evictable(p, e) && (!p.lastResort || e.owner() != p.owner || !fitsAfter()) {
			s.dropIndexLocked(sh, e)
			live -= len(e)
			dropped = true
		}
		pos += uint64(len(e))
	}
	newCap := place(live)
	if !dropped && len(sh.log) == 1 && newCap == cap(c0.buf) {
		return false // the log's only chunk, full of protected records: nothing to win
	}
	if live > 0 {
		dst, dstBuf := s.appendLocked(sh, live, newCap)
		off := 0
		for pos := sh.head; pos < end; {
			e := c0.entryAt(pos)
			if s.indexedAt(sh, pos, e) {
				copy(dstBuf[off:], e)
				sh.index[s.prefixOf(e.key())] = dst + uint64(off)
				off += len(e)
			}
			pos += uint64(len(e))
		}
		p.budget -= int64(live)
	}
	s.bytes.Add(int64(newCap - sh.dropFirstChunk()))
	s.trimLocked(sh)
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
			if e := sh.entryAt(pos); e.expires() <= now {
				s.dropIndexLocked(sh, e)
			}
		}
		s.reclaimDeadLocked(sh, now)
		sh.mu.Unlock()
	}
}
