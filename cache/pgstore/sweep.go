package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// addColumnsLockWait bounds how long migrate waits for the lock that adds the
// columns a table of an earlier version lacks (lock_timeout).
const addColumnsLockWait = 2 * time.Second

// migrate creates the table and its index if they are missing, under an
// advisory lock: instances starting together would otherwise race in CREATE
// TABLE IF NOT EXISTS (which is not safe against itself).
func (s *Store) migrate(ctx context.Context) error {
	h := fnv.New64a()
	h.Write([]byte("idemproxy schema " + s.table))
	lock := int64(h.Sum64())
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.q.schema); err != nil {
			return err
		}
		// addColumns adds the columns a table of an earlier version lacks
		// (and does nothing to one that has it). Its ALTER's exclusive lock waits for every
		// transaction holding the table (a dump, a long query), and every other
		// statement on it queues behind the ALTER meanwhile: wait briefly.
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", addColumnsLockWait.Milliseconds())); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.q.addColumns); err != nil {
			if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
				return fmt.Errorf("adding the columns waited, lease_until and found_by: the table's exclusive lock was not granted within %v (a transaction holds the table: a dump, a long query); start again once it ends, or apply the DDL `idemproxy migrate` prints: %w", addColumnsLockWait, err)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: creating table %s: %w", s.table, err)
	}
	return nil
}

// Sweep deletes expired rows, batch rows per statement, until a statement finds
// fewer than a batch or ctx ends, then the reconcile jobs whose hold has ended;
// it returns how many it deleted. Each batch is
// its own short transaction that skips rows other transactions hold, so it never
// blocks requests for long. Reads ignore expired rows whether or not they are
// swept.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.q.sweep, s.sweepBatch, s.nowArg())
		if err != nil {
			return total, fmt.Errorf("pgstore: sweeping expired rows: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.sweepBatch) {
			n, err := s.sweepReconcile(ctx) // reconcile.go: jobs past their hold
			return total + n, err
		}
		select { // let requests have the rows' pages between batches
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *Store) sweepLoop(ctx context.Context) {
	defer s.sweeping.Done()
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = s.Sweep(ctx) // a failed sweep is retried at the next tick
		}
	}
}
