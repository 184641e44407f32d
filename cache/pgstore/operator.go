package pgstore

// What operators and settlement use: resolve a held key, read, delete, ping.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/internal/localcache"
	"github.com/jackc/pgx/v5"
)

// Resolve implements cache.Store.
func (s *Store) Resolve(ctx context.Context, key string, resp *cache.Response, ttl time.Duration) error {
	var blob []byte
	if resp != nil {
		if resp.Unknown {
			return errors.New("pgstore: resolving with another unknown outcome")
		}
		var err error
		if blob, err = cache.EncodeResponse(resp); err != nil {
			return err
		}
	}
	var n, notified int64
	if err := s.pool.QueryRow(ctx, s.q.resolve, []byte(key), blob, ms(ttl), s.nowArg(), s.announceAll).Scan(&n, &notified); err != nil {
		return fmt.Errorf("pgstore: resolving key: %w", err)
	}
	switch n {
	case 1:
		if err := s.local.Forget(ctx, key); err != nil {
			return fmt.Errorf("pgstore: resolving key: %w", localcache.Unsettled(err))
		}
		return nil
	case 0:
		return cache.ErrNotFound
	}
	return fmt.Errorf("pgstore: resolving key: %w", cache.ErrNotUnknown)
}

// Get implements cache.Store.
func (s *Store) Get(ctx context.Context, key string) (*cache.Record, error) {
	var rec row
	err := s.pool.QueryRow(ctx, s.q.get, []byte(key), s.nowArg()).Scan(&rec.lapsed, &rec.state, &rec.fingerprint, &rec.createdAt, &rec.expiresAt, &rec.response,
		&rec.info, &rec.replays, &rec.lastReplay)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, cache.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: reading key: %w", err)
	}
	return rec.record()
}

// Delete implements cache.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	var (
		live     bool
		notified int64
	)
	if err := s.pool.QueryRow(ctx, s.q.delete, []byte(key), s.nowArg(), s.announceAll).Scan(&live, &notified); err != nil {
		return fmt.Errorf("pgstore: deleting key: %w", err)
	}
	if !live {
		return cache.ErrNotFound
	}
	if err := s.local.Forget(ctx, key); err != nil {
		return fmt.Errorf("pgstore: deleting key: %w", localcache.Unsettled(err))
	}
	return nil
}

// Ping implements cache.Store.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}
