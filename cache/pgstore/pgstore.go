// Package pgstore is a cache.Store on PostgreSQL (pgx v5, pgxpool): durable
// records, shared by every instance that points at the same table.
//
// Each operation is one SQL statement, so one round trip: a claim, a replay or a
// conflict is one; a first execution is two (claim, complete) plus one per lease
// renewal. (A claim that finds a lapsed row, and a complete that finds no live
// lock of its token, take a second statement.) A claim reads first: a replay
// or a conflict is a primary-key read that writes nothing (no row lock, no WAL); the lock is inserted only when the
// key has no row. Every statement is atomic on its own (INSERT … ON CONFLICT, or
// a fenced UPDATE/DELETE), and idempotent for its token, like the Redis store's
// scripts. Expiry is checked on every read; expired rows are deleted in the
// background in small batches (Sweep).
//
// The middleware passes keys that are already SHA-256 hex digests, so a client's
// key never reaches the database verbatim.
package pgstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/internal/localcache"
	"github.com/idemproxy/idemproxy/cache/internal/replays"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults.
const (
	DefaultTable         = "idemproxy_records"
	DefaultSweepInterval = time.Minute
	DefaultSweepBatch    = 1000
)

// Options configure a Store. The zero value is usable: defaults apply to
// zero fields.
type Options struct {
	// Table is the table: a name, optionally schema-qualified (letters,
	// digits and underscores). "" means DefaultTable.
	Table string
	// SkipCreateSchema makes New only check that the table is there, for
	// teams that apply the DDL themselves (Schema, `idemproxy migrate`). By
	// default New creates the table and its index when they do not exist.
	SkipCreateSchema bool
	// SweepInterval is how often expired rows are deleted in the background;
	// negative turns the sweeper off (another instance, or a cron job
	// calling Sweep, deletes them; reads ignore them either way). 0 means
	// DefaultSweepInterval.
	SweepInterval time.Duration
	// SweepBatch is how many rows a sweep looks at (and deletes, if they
	// expired) per statement. 0 means DefaultSweepBatch.
	SweepBatch int
	// LocalCache keeps up to this many bytes of completed records in this
	// process's memory, so a replay is answered without a round trip.
	// Deletes and resolves through any instance reach every instance's
	// cache before it answers again (how: cache/internal/localcache).
	// Negative keeps none. 0 means the default, DefaultLocalCache: a share
	// of the process's memory budget, and none with Now set (the cache's
	// expiry runs on real time).
	LocalCache int64
	// Batches is how many batches the store keeps in flight: the request
	// path's statements from concurrent requests are sent together, one
	// batch and one transaction each (see batcher). Negative sends every
	// statement on its own. 0 means DefaultBatches.
	Batches int
	// Now makes the store use this clock instead of the database server's
	// for lease and record expiry (tests). Every process sharing the table
	// must agree on time, so production code leaves the server's clock in
	// charge. nil: the server's.
	Now func() time.Time
}

// Store is the PostgreSQL cache.Store. The caller owns the pool and closes it
// after the store.
type Store struct {
	pool         *pgxpool.Pool
	table        string
	createSchema bool
	sweepEvery   time.Duration
	sweepBatch   int
	now          func() time.Time

	q        queries
	rq       reconcileQueries // reconcile.go
	channel  string           // LISTEN/NOTIFY channel of this table (channels.go), which carries the pings
	channels []string         // channel, then legacy ones: listened to; deletes and resolves are announced on all (caches must hear them), completes and releases on channel only (waiters poll)
	// announceOwn and announceAll are channels[:1] and channels as statement
	// arguments, boxed once per store rather than at every Complete or Release.
	announceOwn, announceAll any
	sub                      listener

	localBytes int64
	local      *localcache.Cache // nil: no local cache

	batches int
	batch   *batcher // nil: every statement on its own

	replays *replays.Batch // the replay counts not written yet (replays.go)

	stopSweep context.CancelFunc
	sweeping  sync.WaitGroup
	closeOnce sync.Once
}

var (
	_ cache.Store       = (*Store)(nil)
	_ cache.Notifier    = (*Store)(nil)
	_ cache.LocalCacher = (*Store)(nil)
)

// DefaultLocalCache is the size of the local cache Options.LocalCache 0
// means, and what it was taken from: a sixteenth of the process's memory
// budget (GOMEMLIMIT, else its cgroup's memory limit), at least 8MiB and at
// most 256MiB; 64MiB when there is no budget.
func DefaultLocalCache() (int64, string) { return localcache.DefaultSize() }

// LocalCacheStats implements cache.LocalCacher.
func (s *Store) LocalCacheStats() (cache.LocalCacheStats, bool) {
	if s.local == nil {
		return cache.LocalCacheStats{}, false
	}
	return s.local.Stats(), true
}

var tableName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,62}\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// CheckTable validates a table name.
func CheckTable(name string) error {
	if !tableName.MatchString(name) {
		return fmt.Errorf("postgres table %q: want a name of letters, digits and underscores, optionally schema.name", name)
	}
	return nil
}

// New returns a Store over pool. It creates the schema (unless
// opts.SkipCreateSchema) or checks that the table has the columns this version
// needs, and starts the sweeper. Call Close when done with it.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	opts.Table = cmp.Or(opts.Table, DefaultTable)
	if err := CheckTable(opts.Table); err != nil {
		return nil, err
	}
	switch {
	case opts.LocalCache < 0:
		opts.LocalCache = 0
	case opts.LocalCache == 0 && opts.Now == nil:
		opts.LocalCache, _ = DefaultLocalCache()
	}
	if opts.SweepBatch < 0 {
		return nil, fmt.Errorf("pgstore: the sweep batch must be at least 1 (0: the default), got %d", opts.SweepBatch)
	}
	s := &Store{
		pool:         pool,
		table:        opts.Table,
		createSchema: !opts.SkipCreateSchema,
		sweepEvery:   max(cmp.Or(opts.SweepInterval, DefaultSweepInterval), 0), // negative: no sweeper
		sweepBatch:   cmp.Or(opts.SweepBatch, DefaultSweepBatch),
		now:          opts.Now,
		localBytes:   opts.LocalCache,
		batches:      max(cmp.Or(opts.Batches, DefaultBatches), 0), // negative: none
	}
	s.q = buildQueries(s.table)
	s.rq = buildReconcileQueries(s.table)
	s.replays = replays.New(cache.ReplayFlush, replayFlushTimeout, s.writeReplays)
	if s.createSchema {
		if err := s.migrate(ctx); err != nil {
			return nil, err
		}
	}
	if _, err := s.pool.Exec(ctx, s.q.check); err != nil {
		return nil, fmt.Errorf("pgstore: table %s is missing, not an idemproxy table, or of an earlier version (apply the DDL `idemproxy migrate` prints): %w", s.table, err)
	}
	if err := s.resolveChannels(ctx); err != nil {
		return nil, err
	}
	if s.local = localcache.New(s.localBytes, rand.Text()); s.local != nil {
		s.startListening()
	}
	if s.batches > 0 {
		s.batch = newBatcher(s.pool, s.batches)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s.stopSweep = cancel
	if s.sweepEvery > 0 {
		s.sweeping.Add(1)
		go s.sweepLoop(sctx)
	}
	return s, nil
}

// Close stops the sweeper and the notification listener. It does not close the
// pool, which the caller owns. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.replays.Close() // first: it writes what it holds
		s.stopSweep()
		s.sweeping.Wait()
		s.sub.close()
		if s.batch != nil {
			s.batch.close()
		}
	})
	return nil
}

// nowArg is the injected clock's time, or nil: the statement then reads the
// server's clock (statement_timestamp()).
func (s *Store) nowArg() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// holdMs is a claim's hold in milliseconds (0: none).
func holdMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ms(d)
}

// sweepMs is how long after its claim ends the sweep first looks at a claim's
// row (sweep_at): the TTL its record will have, so that the completion keeps
// sweep_at (a HOT update); the hold when the TTL is not known (the
// completion then moves sweep_at to the record's expiry).
func sweepMs(lock cache.Claim) int64 {
	if lock.TTL > 0 {
		return ms(lock.TTL)
	}
	return holdMs(lock.Hold)
}

// ReadsDeferredClaims implements cache.DeferredClaims: a claim's Info and
// Owner are read through Claim.EncodedInfo and Claim.ScopeOwner.
func (*Store) ReadsDeferredClaims() {}

// ClaimOrGet implements cache.Store, reading first: a replay or a conflict is
// one primary-key read that writes nothing, and a first execution one
// statement that inserts the claim. Only a row that lapsed and was not swept
// yet costs a second statement (takeover). In the rare race where another
// transaction inserted the key after a statement's snapshot was taken, the
// statement finds the conflict but cannot read the row; it is run again, and
// then sees it.
//
// With a local cache, a completed record it holds is answered with no round
// trip at all.
func (s *Store) ClaimOrGet(ctx context.Context, key string, lock cache.Claim) (*cache.Record, bool, error) {
	if lock.Token == "" {
		return nil, false, errors.New("pgstore: empty claim token")
	}
	return s.local.Claim(key, func() (*cache.Record, bool, time.Duration, error) { return s.claimOrGet(ctx, key, lock) })
}

// claimOrGet runs the claim; ttl is a found record's remaining life by the
// database's clock.
func (s *Store) claimOrGet(ctx context.Context, key string, lock cache.Claim) (*cache.Record, bool, time.Duration, error) {
	lock.Info = lock.EncodedInfo() // sent with the claim: the statement decides
	query := s.q.claim
	for attempt := 0; attempt < 5; attempt++ {
		var (
			outcome int16
			rec     row
			now     time.Time
		)
		err := s.queryRow(ctx, key, query, []any{[]byte(key), []byte(lock.Token), []byte(lock.Fingerprint), ms(lock.Duration), s.nowArg(), traceArg(lock.Trace), holdMs(lock.Hold), sweepMs(lock), infoArg(lock.Info)},
			&outcome, &rec.state, &rec.fingerprint, &rec.createdAt, &rec.expiresAt, &rec.response, &now)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue
		case err != nil:
			return nil, false, 0, fmt.Errorf("pgstore: claiming key: %w", err)
		case outcome == 0:
			return nil, false, 0, nil
		case outcome == 2: // an expired row: take it over
			query = s.q.takeover
			continue
		case outcome == 3: // a claim that lapsed, held
			err = s.queryRow(ctx, key, s.q.find, []any{[]byte(key), []byte(lock.Token), []byte(lock.Fingerprint), s.nowArg()},
				&rec.lapsed, &rec.found, &rec.state, &rec.fingerprint, &rec.createdAt, &rec.expiresAt, &rec.response, &now)
			switch {
			case errors.Is(err, pgx.ErrNoRows): // expired meanwhile
				query = s.q.claim
				continue
			case err != nil:
				return nil, false, 0, fmt.Errorf("pgstore: claiming key: %w", err)
			}
		}
		r, err := rec.record()
		if err != nil {
			return nil, false, 0, err
		}
		return r, true, rec.expiresAt.Sub(now), nil
	}
	return nil, false, 0, errors.New("pgstore: claiming key: the row kept changing under the claim")
}

// Complete implements cache.Store. With a local cache, the record the common
// statement (completeHeld) stored is kept there (localcache: Begin before the
// write, End after it), so the first replay on this instance needs no round
// trip, and that statement carries the cache's ping when one is due
// (localcache.Cache.Carry).
func (s *Store) Complete(ctx context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	if rec == nil || rec.Response == nil {
		return errors.New("pgstore: completing without a response")
	}
	if token == "" {
		return cache.ErrClaimLost
	}
	blob, err := cache.EncodeResponse(rec.Response)
	if err != nil {
		return err
	}
	created := rec.CreatedAt
	if created.IsZero() {
		created = time.Now()
		if s.now != nil {
			created = s.now()
		}
	}
	write := s.local.Begin(key)
	sent := time.Now()
	err = s.fenced(ctx, "completing", s.q.completeHeld, key, token, blob, rec.Response.Unknown, ms(ttl), s.nowArg(), s.announceOwn, s.local.Carry())
	// Kept as it was sent, encoded; only a Complete that stored it.
	s.local.EndEncoded(write, rec.Fingerprint, created, sent.Add(time.Duration(ms(ttl))*time.Millisecond),
		blob, rec.Response.Unknown || err != nil, time.Duration(ms(ttl))*time.Millisecond)
	if !errors.Is(err, cache.ErrClaimLost) {
		return err
	}
	// Not the token's live claim: a lapsed or absent one, a re-sent Complete, or
	// another holder. The full statement tells them apart.
	return s.fenced(ctx, "completing", s.q.complete, key, token, []byte(rec.Fingerprint), created, ms(ttl), blob, rec.Response.Unknown, s.nowArg(), s.announceOwn)
}

// Release implements cache.Store.
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.fenced(ctx, "releasing", s.q.release, key, token, s.nowArg(), s.announceOwn)
}

// Extend implements cache.Store.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	return s.fenced(ctx, "extending lease", s.q.extend, key, token, ms(lease), s.nowArg())
}

func (s *Store) fenced(ctx context.Context, what, query string, key, token string, args ...any) error {
	if token == "" {
		return cache.ErrClaimLost
	}
	var (
		ok       bool
		notified int64
	)
	if err := s.queryRow(ctx, key, query, append([]any{[]byte(key), []byte(token)}, args...), &ok, &notified); err != nil {
		return fmt.Errorf("pgstore: %s: %w", what, err)
	}
	if !ok {
		return cache.ErrClaimLost
	}
	return nil
}

// queryRow runs one request-path statement, through a batch when the store
// batches, and scans its one row.
func (s *Store) queryRow(ctx context.Context, key, query string, args []any, dest ...any) error {
	if s.batch == nil {
		return s.pool.QueryRow(ctx, query, args...).Scan(dest...)
	}
	return s.batch.run(ctx, key, query, args, dest...)
}
