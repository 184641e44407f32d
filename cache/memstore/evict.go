package memstore

import (
	"math/rand/v2"
	"sync/atomic"
)

func (s *Store) over() bool {
	return s.records.Load() > s.maxRecs.Load() || s.bytes.Load() > s.maxByte.Load()
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
	scan       int   // entries evictBehindLocked may still look at in all

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

// evictable reports whether the live record e may go; for a nil e, whether
// the owner's own records may.
func (s *Store) evictable(p *policy, e entry) bool {
	switch {
	case e == nil:
	case p.keep != nil && e.isKey(p.keep):
		return false
	case p.any:
		return true
	}
	id := p.owner
	if e != nil {
		id = e.owner()
	}
	u := s.owners.get(id)
	if id == p.owner {
		return p.lastResort || u.records+p.records > p.shareRecords || u.bytes+p.growth > p.shareBytes
	}
	return u.records > p.shareRecords || u.bytes > p.shareBytes
}

// makeRoom evicts, within owner's policy, until it can reserve records and
// bytes more (see tryReserve), and reports whether it reserved them; growth is
// what owner's usage will grow by. It visits the shards round-robin, taking
// one shard lock at a time; in each, holes, expired and evictable records at
// the head go first (oldest first). Behind a protected record at the head, it
// looks further for an evictable record when a record is needed (its entry
// becomes a hole), and when bytes are needed it compacts the head's chunk
// (see compactHeadLocked), so the head keeps moving and the space behind it
// comes back. The work of one call is bounded (scanBudget entries looked at,
// compactBudget bytes moved).
func (s *Store) makeRoom(owner ownerID, records, bytes, growth int64, keep *ikey) bool {
	reserve := func() bool { return s.tryReserve(records, bytes) }
	if reserve() {
		return true
	}
	p := policy{owner: owner, keep: keep, now: s.now().UnixNano(), budget: compactBudget, scan: scanBudget,
		records: records, bytes: bytes, growth: growth}
	if s.sweepHeads(&p, reserve) {
		return true
	}
	p.lastResort = true
	return s.sweepHeads(&p, reserve)
}

// evictOldest evicts the oldest completed records, whoever owns them, until
// the store is within its bounds (a lowered bound). It never evicts a claim.
func (s *Store) evictOldest() {
	p := policy{any: true, now: s.now().UnixNano()}
	s.sweepHeads(&p, func() bool { return !s.over() })
}

// mark is where a sweep stopped looking in a shard: the scan for other
// owners' evictable records resumes at scanned, and compaction stops at stop
// (what it moved lies past it). Each shard keeps the mark of the last sweep
// that looked; a sweep that finds another's starts afresh.
type mark struct {
	sweep         uint64
	scanned, stop uint64
}

var sweeps atomic.Uint64 // numbers the sweeps, for their marks

// sweepHeads visits the shards round-robin, one step each, until done reports
// true or no shard can make any more room, and reports whether done did.
func (s *Store) sweepHeads(p *policy, done func() bool) bool {
	n := uint32(len(s.shards))
	id := sweeps.Add(1)
	// A random first shard: a round-robin start would line up with a
	// pattern in the callers (owners taking turns) and visit some shards
	// first every time.
	start := rand.Uint32N(n)
	idle := uint32(0) // consecutive shards with no room to give
	for i := start; !done(); i++ {
		if idle >= n {
			return false
		}
		sh := &s.shards[i%n]
		sh.mu.Lock()
		p.shares(s)
		progress := s.stepLocked(sh, p)
		if !progress && len(sh.log) > 0 && !p.any {
			m := &sh.mark
			if m.sweep != id {
				*m = mark{sweep: id, scanned: sh.head, stop: sh.end()}
			}
			if p.scan > 0 && s.records.Load()+p.records > s.maxRecs.Load() {
				progress = s.evictBehindLocked(sh, p, m)
			}
			if !progress && p.budget > 0 && sh.head < m.stop && s.bytes.Load()+p.bytes > s.maxByte.Load() {
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

// Per visit of a shard, evictBehindLocked looks at no more than this many
// entries for other owners' records, and this many for the owner's own.
const (
	scanOthers = 16
	scanOwn    = 512
)

// evictBehindLocked drops expired and evictable records behind a protected
// head, oldest first, until the store has the records asked for; their
// entries become holes. It looks for other owners' evictable records from
// where this sweep last stopped in sh (the head at first), then, when the
// owner's own records may go, for those from where the owner's last look in
// sh stopped (ownScan: none of its records lies before it). A chunk it comes
// to that is at least half holes is compacted first, so holes do not pile up
// behind a protected head. It reports whether it dropped or freed anything,
// or has more to look at.
func (s *Store) evictBehindLocked(sh *shard, p *policy, m *mark) bool {
	var progress, more bool
	m.scanned, progress, more = s.scanLocked(sh, p, m.scanned, scanOthers, func(e entry) int {
		if e.expires() <= p.now || e.owner() != p.owner && s.evictable(p, e) {
			return drop
		}
		return pass
	})
	if s.records.Load()+p.records <= s.maxRecs.Load() || p.scan <= 0 || !s.evictable(p, nil) {
		return progress || more
	}
	next, dropped, moreOwn := s.scanLocked(sh, p, sh.ownScan[p.owner], scanOwn, func(e entry) int {
		switch {
		case e.owner() != p.owner:
			return pass
		case s.evictable(p, e):
			return drop
		}
		return halt // kept: the next look starts here
	})
	if len(sh.ownScan) >= maxOwnScans {
		clear(sh.ownScan) // hints only: a look without one starts at the head
	}
	sh.ownScan[p.owner] = next
	return progress || more || dropped || moreOwn
}

// maxOwnScans bounds a shard's ownScan hints.
const maxOwnScans = 1024

// What scanLocked does with an entry.
const (
	pass = iota
	drop
	halt
)

// scanLocked looks through sh's log from from (the head, if from is before
// it) at up to limit entries (and p.scan), asking what to do with each (holes
// pass whatever the answer), and drops records until the store has the
// records asked for. A chunk it comes to that is at least half holes is
// compacted first. It returns where it stopped, whether it dropped or freed
// anything, and whether it stopped at a limit with more to look at.
func (s *Store) scanLocked(sh *shard, p *policy, from uint64, limit int, what func(entry) int) (pos uint64, progress, more bool) {
	pos = max(from, sh.head)
	for i := sh.chunkOf(pos); i < len(sh.log); i++ {
		if c := &sh.log[i]; i < len(sh.log)-1 && 2*c.live <= len(c.buf) && p.budget > 0 && s.compactLocked(sh, i, p, false) {
			progress = true // its space is back; its records moved to the tail
			i--
			continue
		}
		c := &sh.log[i]
		pos = max(pos, c.base)
		for end := c.base + uint64(len(c.buf)); pos < end; {
			if limit <= 0 || p.scan <= 0 {
				return pos, progress, true
			}
			e := c.entryAt(pos)
			limit--
			p.scan--
			// what first: it is cheaper than the index lookup that tells a
			// record from a hole, and most entries pass.
			if w := what(e); w != pass && s.indexedAt(sh, pos, e) {
				if w == halt {
					return pos, progress, false
				}
				s.dropIndexLocked(sh, e)
				progress = true
				if s.records.Load()+p.records <= s.maxRecs.Load() {
					return pos + uint64(len(e)), true, false
				}
			}
			pos += uint64(len(e))
		}
	}
	return pos, progress, false
}

// compactHeadLocked compacts the chunk at sh's head, evicting what the
// policy allows (see compactLocked).
func (s *Store) compactHeadLocked(sh *shard, p *policy) bool {
	return s.compactLocked(sh, 0, p, true)
}

// compactLocked frees the chunk at i in sh's log. Expired records in it are
// dropped, and with evict the evictable ones (the owner's own records as a
// last resort only until the room asked for will be there); the others are
// copied to the log's tail, into the last chunk if they fit, else into a new
// chunk of exactly their size, and re-indexed there. So the byte count never
// grows, and records keep their order among themselves (though they now come
// after records written since). It reports whether it did anything: a chunk
// whose removal would win no space and move no head is left alone.
func (s *Store) compactLocked(sh *shard, i int, p *policy, evict bool) bool {
	c := sh.log[i] // a copy: appending may move the log's slice
	from, end := c.base, c.base+uint64(len(c.buf))
	if i == 0 {
		from = sh.head
	}
	dropped := false
	for pos := from; pos < end; {
		e := c.entryAt(pos)
		if s.indexedAt(sh, pos, e) && e.expires() <= p.now {
			s.dropIndexLocked(sh, e)
			dropped = true
		}
		pos += uint64(len(e))
	}
	last := i == len(sh.log)-1
	// place is what moving n bytes to the tail costs: nothing in the last
	// chunk's spare room, else a chunk of exactly n.
	place := func(n int) int {
		if n == 0 || !last && s.newChunkFor(sh, n) == 0 {
			return 0
		}
		return n
	}
	fitsAfter := func() bool {
		return s.records.Load()+p.records <= s.maxRecs.Load() &&
			s.bytes.Load()-int64(cap(c.buf))+int64(place(sh.log[i].live))+p.bytes <= s.maxByte.Load()
	}
	if evict {
		for pos := from; pos < end; {
			e := c.entryAt(pos)
			if s.indexedAt(sh, pos, e) && s.evictable(p, e) && (!p.lastResort || e.owner() != p.owner || !fitsAfter()) {
				s.dropIndexLocked(sh, e)
				dropped = true
			}
			pos += uint64(len(e))
		}
	}
	live := sh.log[i].live
	newCap := place(live)
	if !dropped && newCap == cap(c.buf) && (i > 0 || len(sh.log) == 1) {
		return false // nothing to win
	}
	if live > 0 {
		dst, _ := s.appendLocked(sh, live, newCap)
		d := sh.log[len(sh.log)-1].buf // the chunk written to
		off := int(dst - sh.log[len(sh.log)-1].base)
		for pos := from; pos < end; {
			e := c.entryAt(pos)
			if s.indexedAt(sh, pos, e) {
				copy(d[off:], e)
				s.indexLocked(sh, sh.log[len(sh.log)-1].base+uint64(off), entry(d[off:off+len(e)]))
				off += len(e)
			}
			pos += uint64(len(e))
		}
		p.budget -= int64(live)
	}
	s.bytes.Add(int64(newCap - sh.removeChunk(i)))
	s.trimLocked(sh)
	return true
}
