package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/internal/replays"
)

var _ cache.ReplayCounter = (*Store)(nil)

// replayFlushTimeout bounds one write of the replay counts.
const replayFlushTimeout = 10 * time.Second

// CountReplay implements cache.ReplayCounter: the count is added up in
// memory, and the counts of every key replayed are written together every
// cache.ReplayFlush (one UPDATE of them all) and at Close. A replay costs no
// statement.
func (s *Store) CountReplay(key string, created, at time.Time) {
	s.replays.Add(key, created, at)
}

// FlushReplays implements cache.ReplayCounter.
func (s *Store) FlushReplays(ctx context.Context) error { return s.replays.Flush(ctx) }

// writeReplays writes counts in one statement.
func (s *Store) writeReplays(ctx context.Context, counts []replays.Count) error {
	keys := make([][]byte, len(counts))
	created := make([]time.Time, len(counts))
	n := make([]int64, len(counts))
	last := make([]time.Time, len(counts))
	for i, c := range counts {
		keys[i], created[i], n[i], last[i] = []byte(c.Key), c.Created, c.N, c.Last
	}
	if _, err := s.pool.Exec(ctx, s.q.count, keys, created, n, last); err != nil {
		return fmt.Errorf("pgstore: writing replay counts: %w", err)
	}
	return nil
}
