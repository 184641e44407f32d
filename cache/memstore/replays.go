package memstore

import (
	"context"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

var _ cache.ReplayCounter = (*Store)(nil)

// replayCount is a completed record's replays: how many, and the latest
// (unix nanoseconds), for the record created at created (a record that
// replaced it under the same prefix starts again).
type replayCount struct {
	created, n, last int64
}

// CountReplay implements cache.ReplayCounter: in place, under the shard's
// lock (the log's entries are never written again, so the count is kept
// beside them, and dropped with the record).
func (s *Store) CountReplay(key string, created, at time.Time) {
	k := internKey(key)
	sh := s.shardFor(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.lookupLocked(sh, &k)
	if e == nil || e.created() != created.UnixNano() {
		return // replaced, or gone, since it was replayed
	}
	if sh.replays == nil {
		sh.replays = make(map[prefix]replayCount)
	}
	p := s.prefixOf(&k)
	rc := sh.replays[p]
	if rc.created != e.created() {
		rc = replayCount{created: e.created()}
	}
	rc.n++
	rc.last = max(rc.last, at.UnixNano())
	sh.replays[p] = rc
}

// replaysLocked is the count of the indexed entry e.
func (s *Store) replaysLocked(sh *shard, e entry) replayCount {
	rc, ok := sh.replays[s.prefixOf(e.key())]
	if !ok || rc.created != e.created() {
		return replayCount{}
	}
	return rc
}

// fill sets rec's count.
func (rc replayCount) fill(rec *cache.Record) {
	if rc.n > 0 {
		rec.Replays, rec.LastReplay = rc.n, time.Unix(0, rc.last)
	}
}

// FlushReplays implements cache.ReplayCounter: every count is in place.
func (s *Store) FlushReplays(context.Context) error { return nil }
