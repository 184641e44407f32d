package stores

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemproxy/idemproxy/cache/pgstore"
)

// Postgres is the PostgreSQL store's settings (its URL selects it): durable,
// shared by every instance pointing at the same database.
type Postgres struct {
	Table             string        `json:"table" go:"'pgstore.WithTable'" help:"the PostgreSQL store's table; 'schema.name' allowed"`
	CreateSchema      bool          `json:"create_schema" go:"'pgstore.WithCreateSchema'" help:"create the table and its index at start-up when missing; 'false': they must exist ('idemproxy migrate' prints or applies the DDL)"`
	SweepInterval     time.Duration `json:"sweep_interval" go:"'pgstore.WithSweep'" help:"how often expired rows are deleted, in batches of 1000; '0': never by this instance (reads ignore expired rows anyway)"`
	LocalCache        int64         `json:"local_cache" unit:"bytes" go:"'pgstore.WithLocalCache'" help:"off when '0'; else bytes of completed records kept in each instance's memory, so that a replay costs no round trip; exact across instances through LISTEN/NOTIFY (see docs/stores.md#local-cache-of-completed-records)"`
	SynchronousCommit string        `json:"synchronous_commit" go:"the pool's 'ConnConfig.RuntimeParams' ('synchronous_commit')" help:"PostgreSQL's synchronous_commit for the store's connections ('on', 'off', 'local', 'remote_write', 'remote_apply'); empty: the server's ('on' unless configured). 'off' answers before a commit is flushed: a database crash may lose the last moments' claims and completions, and a retry of one then runs again (see docs/stores.md#durability-trade-offs)"`
}

// synchronousCommit is what synchronous_commit accepts.
var synchronousCommit = []string{"on", "off", "local", "remote_write", "remote_apply"}

// DefaultPostgres is the PostgreSQL store's defaults.
func DefaultPostgres() Postgres {
	return Postgres{Table: pgstore.DefaultTable, CreateSchema: true, SweepInterval: pgstore.DefaultSweepInterval}
}

// Validate checks p and the URL (parsed only; nothing is dialled).
func (p Postgres) Validate(rawURL string) error {
	if err := p.Check(); err != nil {
		return err
	}
	if _, err := pgxpool.ParseConfig(rawURL); err != nil {
		return fmt.Errorf("postgres URL %s: %w", Redact(rawURL), redactErr(err, rawURL))
	}
	return nil
}

// Open opens the PostgreSQL store at the URL: a pool, a check that the server
// answers within PingTimeout, the schema (created, or checked), and the store,
// with the function that closes the store and then the pool.
func (p Postgres) Open(ctx context.Context, rawURL string, env Env) (*pgstore.Store, func() error, error) {
	if err := p.Validate(rawURL); err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres URL %s: %w", Redact(rawURL), redactErr(err, rawURL))
	}
	if env.Trace {
		cfg.ConnConfig.Tracer = newPGTracer()
	}
	if p.SynchronousCommit != "" { // every connection's start-up parameter, overriding the URL's
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = p.SynchronousCommit
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres URL %s: %w", Redact(rawURL), redactErr(err, rawURL))
	}
	pctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, nil, &UnreachableError{Store: "PostgreSQL", URL: Redact(rawURL), Err: redactErr(err, rawURL)}
	}
	ps, err := pgstore.New(pctx, pool, pgstore.WithTable(p.Table), pgstore.WithCreateSchema(p.CreateSchema),
		pgstore.WithSweep(p.SweepInterval, pgstore.DefaultSweepBatch), pgstore.WithLocalCache(p.LocalCache))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return ps, func() error { err := ps.Close(); pool.Close(); return err }, nil
}

// Check checks p's settings, without a URL.
func (p Postgres) Check() error {
	if err := pgstore.CheckTable(p.Table); err != nil {
		return &FieldError{Store: "postgres", Field: "table", Err: err}
	}
	if p.SweepInterval < 0 {
		return fieldErr("postgres", "sweep_interval", "must not be negative, got %v", p.SweepInterval)
	}
	if p.LocalCache < 0 {
		return fieldErr("postgres", "local_cache", "must not be negative, got %d", p.LocalCache)
	}
	if p.SynchronousCommit != "" && !slices.Contains(synchronousCommit, p.SynchronousCommit) {
		return fieldErr("postgres", "synchronous_commit", "want one of %s, or empty for the server's, got %q", strings.Join(synchronousCommit, ", "), p.SynchronousCommit)
	}
	return nil
}
