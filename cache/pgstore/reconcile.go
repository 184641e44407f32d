package pgstore

// Reconcile jobs (cache.Reconciler): a second table beside the records',
// named after it with _reconcile, one row per job, indexed by due time. A
// claim takes the row due first with FOR UPDATE SKIP LOCKED, so concurrent
// claimers never wait on one another nor take the same job.
//
//	key    the store key of the held record
//	due    when the job is next due (or its claim lapses)
//	token  the claim's token; NULL when unclaimed
//	until  the hold's end: the sweeper deletes the job then, also when no
//	       instance reconciles any more
//	job    the msgpack-encoded cache.Job

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemproxy/idemproxy/cache"
)

var _ cache.Reconciler = (*Store)(nil)

const reconcileSchemaSQL = `CREATE TABLE IF NOT EXISTS {R} (
	key   bytea       PRIMARY KEY,
	due   timestamptz NOT NULL,
	token bytea,
	until timestamptz NOT NULL,
	job   bytea       NOT NULL
);
CREATE INDEX IF NOT EXISTS {RI} ON {R} (due);
`

type reconcileQueries struct {
	schedule, claim, update, finish, get, sweep string
}

// reconcileReplacer names the job table and its index after table.
func reconcileReplacer(table string) *strings.Replacer {
	parts := strings.Split(table, ".")
	last := parts[len(parts)-1]
	parts[len(parts)-1] = last + "_reconcile"
	return strings.NewReplacer("{R}", pgx.Identifier(parts).Sanitize(), "{RI}", pgx.Identifier{last + "_reconcile_due"}.Sanitize())
}

func buildReconcileQueries(table string) reconcileQueries {
	r := reconcileReplacer(table)
	return reconcileQueries{
		// $1 key, $2 due, $3 job, $4 until.
		schedule: r.Replace(`INSERT INTO {R} (key, due, token, until, job) VALUES ($1, $2, NULL, $4, $3)
ON CONFLICT (key) DO UPDATE SET due = excluded.due, token = NULL, until = excluded.until, job = excluded.job`),
		// $1 now, $2 the claim's end, $3 token.
		claim: r.Replace(`UPDATE {R} r SET due = $2, token = $3
WHERE r.key = (SELECT key FROM {R} WHERE due <= $1 ORDER BY due LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING r.key, r.job`),
		// $1 key, $2 token, $3 due, $4 job.
		update: r.Replace(`UPDATE {R} SET due = $3, token = NULL, job = $4 WHERE key = $1 AND token = $2`),
		// $1 key, $2 token.
		finish: r.Replace(`DELETE FROM {R} WHERE key = $1 AND token = $2`),
		// $1 key.
		get: r.Replace(`SELECT job FROM {R} WHERE key = $1`),
		// $1 batch size, $2 now.
		sweep: r.Replace(`DELETE FROM {R} WHERE key IN (
	SELECT key FROM {R} WHERE until <= coalesce($2::timestamptz, statement_timestamp()) LIMIT $1 FOR UPDATE SKIP LOCKED)`),
	}
}

// ScheduleReconcile implements cache.Reconciler.
func (s *Store) ScheduleReconcile(ctx context.Context, key string, job *cache.Job) error {
	b, err := cache.EncodeJob(job)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.rq.schedule, []byte(key), job.Due, b, job.Until); err != nil {
		return fmt.Errorf("pgstore: scheduling reconcile: %w", err)
	}
	return nil
}

// ClaimReconcile implements cache.Reconciler.
func (s *Store) ClaimReconcile(ctx context.Context, now time.Time, token string, lease time.Duration) (string, *cache.Job, error) {
	if token == "" {
		return "", nil, errors.New("pgstore: empty reconcile token")
	}
	var key, blob []byte
	err := s.pool.QueryRow(ctx, s.rq.claim, now, now.Add(lease), []byte(token)).Scan(&key, &blob)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, cache.ErrNotFound
	}
	if err != nil {
		return "", nil, fmt.Errorf("pgstore: claiming reconcile: %w", err)
	}
	job, err := cache.DecodeJob(blob)
	if err != nil {
		// Never readable: drop it, or it would come back forever.
		_, _ = s.pool.Exec(ctx, s.rq.finish, key, []byte(token))
		return "", nil, err
	}
	return string(key), job, nil
}

// UpdateReconcile implements cache.Reconciler.
func (s *Store) UpdateReconcile(ctx context.Context, key, token string, job *cache.Job) error {
	b, err := cache.EncodeJob(job)
	if err != nil {
		return err
	}
	return s.fencedJob(ctx, "updating", s.rq.update, key, token, job.Due, b)
}

// FinishReconcile implements cache.Reconciler.
func (s *Store) FinishReconcile(ctx context.Context, key, token string) error {
	return s.fencedJob(ctx, "finishing", s.rq.finish, key, token)
}

func (s *Store) fencedJob(ctx context.Context, what, query, key, token string, args ...any) error {
	if token == "" {
		return fmt.Errorf("pgstore: %s reconcile job: %w", what, cache.ErrClaimLost)
	}
	tag, err := s.pool.Exec(ctx, query, append([]any{[]byte(key), []byte(token)}, args...)...)
	if err != nil {
		return fmt.Errorf("pgstore: %s reconcile job: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: %s reconcile job: %w", what, cache.ErrClaimLost)
	}
	return nil
}

// GetReconcile implements cache.Reconciler.
func (s *Store) GetReconcile(ctx context.Context, key string) (*cache.Job, error) {
	var blob []byte
	err := s.pool.QueryRow(ctx, s.rq.get, []byte(key)).Scan(&blob)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, cache.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: reading reconcile job: %w", err)
	}
	return cache.DecodeJob(blob)
}

// sweepReconcile deletes the jobs whose hold has ended, a batch at a time. A
// table created before reconcile (Options.SkipCreateSchema, the DDL not applied
// again) has no job table, and no jobs: that is no error.
func (s *Store) sweepReconcile(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.rq.sweep, s.sweepBatch, s.nowArg())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("pgstore: sweeping lapsed reconcile jobs: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.sweepBatch) || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
