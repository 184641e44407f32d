package memstore

import "time"

// reclaimDeadLocked pops head entries that are holes or expired.
func (s *Store) reclaimDeadLocked(sh *shard, now int64) {
	for len(sh.log) > 0 {
		e := sh.entryAt(sh.head)
		if pos, ok := sh.index[s.prefixOf(e.key())]; ok && pos == sh.head && e.expires() > now {
			return
		}
		s.popHeadLocked(sh, nil)
	}
}

func (s *Store) over() bool {
	return s.records.Load() > s.maxRecs.Load() || s.bytes.Load() > s.maxByte.Load()
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
			if e := sh.entryAt(pos); e.expires() <= now {
				k := *e.key()
				s.dropIndexLocked(sh, &k)
			}
		}
		s.reclaimDeadLocked(sh, now)
		sh.mu.Unlock()
	}
}
