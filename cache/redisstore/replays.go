package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idemproxy/idemproxy/cache/internal/replays"
	"github.com/redis/go-redis/v9"
)

// replayFlushTimeout bounds one write of the replay counts.
const replayFlushTimeout = 10 * time.Second

// CountReplay implements cache.ReplayCounter: the count is added up in
// memory, and the counts of every key replayed are written together every
// cache.ReplayFlush (one pipeline of countScript calls: one round trip per
// node) and at Close. A replay costs no round trip.
func (s *Store) CountReplay(key string, created, at time.Time) {
	s.replays.Add(key, created, at)
}

// FlushReplays implements cache.ReplayCounter.
func (s *Store) FlushReplays(ctx context.Context) error { return s.replays.Flush(ctx) }

// writeReplays writes counts in one pipeline.
func (s *Store) writeReplays(ctx context.Context, counts []replays.Count) error {
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range counts {
			countScript.Eval(ctx, p, []string{s.prefix + c.Key},
				strconv.FormatInt(c.Created.UnixMilli(), 10), c.N, c.Last.UnixMilli())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstore: writing replay counts: %w", err)
	}
	return nil
}
