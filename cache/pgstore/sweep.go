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

// addColumnsLockWait bounds how long migrate waits for a claim on the table
// (lock_timeout): the exclusive lock that adds the columns a table of an
// earlier version lacks, or drops its indexes; the claim that builds an index.
const addColumnsLockWait = 2 * time.Second

// beginner is a pool or a connection.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrate brings the table up to date on db (New's pool, or the connection of
// `idemproxy migrate --apply`).
func (s *Store) migrate(ctx context.Context) error { return migrate(ctx, s.pool, s.table, s.q) }

// migrate creates the tables if they are missing and brings one of an earlier
// version up to date: the columns, then, in a second transaction, the index
// (so that building it on a large table holds the claim that blocks writes,
// not the exclusive one that adding a column took), then, in a third, the
// drop of the earlier indexes. Each transaction runs
// under an advisory lock: instances starting together would otherwise race
// in CREATE TABLE IF NOT EXISTS (which is not safe against itself).
func migrate(ctx context.Context, db beginner, table string, q queries) error {
	h := fnv.New64a()
	h.Write([]byte("idemproxy schema " + table))
	lock := int64(h.Sum64())
	step := func(what string, stmts ...string) error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lock); err != nil {
				return err
			}
			// Each statement takes the table's claim only when it has something
			// to do, but that claim waits for every transaction holding the table
			// (a dump, a long query), and every other statement on it queues
			// behind it meanwhile: wait briefly.
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", addColumnsLockWait.Milliseconds())); err != nil {
				return err
			}
			for _, stmt := range stmts {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
						return fmt.Errorf("%s: the table's claim was not granted within %v (a transaction holds the table: a dump, a long query); start again once it ends, or apply the DDL `idemproxy migrate` prints: %w", what, addColumnsLockWait, err)
					}
					return err
				}
			}
			return nil
		})
	}
	err := step("adding the columns waited, lease_until, found_by, sweep_at, info, replays and last_replay", q.schema, q.addColumns)
	if err == nil {
		err = step("creating the index on sweep_at", q.indexes)
	}
	if err == nil {
		err = step("dropping the indexes on expires_at and the held rows", q.dropIndexes)
	}
	if err != nil {
		return fmt.Errorf("pgstore: creating table %s: %w", table, err)
	}
	return nil
}

// Sweep deletes expired rows, looking at batch rows per statement (those whose
// sweep_at has come), until a statement finds fewer than a batch or ctx ends,
// then the reconcile jobs whose hold has ended; it returns how many it
// deleted. A row looked at that has not expired (a claim held after its claim
// lapsed, a row an earlier version wrote) is looked at again at its expiry.
// Each batch is its own short transaction that skips rows other transactions
// hold, so it never blocks requests for long. Reads ignore expired rows
// whether or not they are swept.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	var total int64
	for {
		var deleted, moved int64
		if err := s.pool.QueryRow(ctx, s.q.sweep, s.sweepBatch, s.nowArg()).Scan(&deleted, &moved); err != nil {
			return total, fmt.Errorf("pgstore: sweeping expired rows: %w", err)
		}
		total += deleted
		if deleted+moved < int64(s.sweepBatch) {
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
