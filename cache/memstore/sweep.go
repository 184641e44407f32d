package memstore

// Expiry: the background sweeper, and reclaiming dead entries at a log head.

import (
	"math"
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
		// Chunks at least half holes (records expired or deleted out of
		// order) give their space back now, not when the head reaches them.
		p := policy{now: now, budget: math.MaxInt64}
		for j := 0; j < len(sh.log)-1; j++ {
			if c := &sh.log[j]; 2*c.live <= len(c.buf) && s.compactLocked(sh, j, &p, false) {
				j--
			}
		}
		sh.mu.Unlock()
	}
}
