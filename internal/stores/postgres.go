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
	// Table is the table, schema.name allowed.
	Table string `json:"table" help:"PostgreSQL store: the table (schema.name allowed)"`
	// CreateSchema creates the table and its index at start-up when missing;
	// false: they must exist (idemproxy migrate prints the DDL).
	CreateSchema bool `json:"create_schema" help:"PostgreSQL store: create the table and its index at start-up when missing; false: they must exist (idemproxy migrate prints the DDL)"`
	// SweepInterval is how often expired rows are deleted, in small batches; 0
	// turns this instance's sweeper off.
	SweepInterval time.Duration `json:"sweep_interval" help:"PostgreSQL store: how often expired rows are deleted, in small batches; 0 = never by this instance"`
	// LocalCache is how many bytes of completed records this instance keeps
	// in memory, so a replay costs no round trip; 0 keeps none.
	LocalCache int64 `json:"local_cache" unit:"bytes" help:"PostgreSQL store: bytes of completed records kept in this instance's memory so replays cost no round trip (kept exact across instances through LISTEN/NOTIFY; see docs/stores.md); 0 = off"`
	// SynchronousCommit is PostgreSQL's synchronous_commit for this store's
	// connections; empty leaves the server's (on unless configured). off
	// answers before a commit is flushed: a database crash may then lose the
	// last moments' claims and completions, and a retry run the request again.
	SynchronousCommit string `json:"synchronous_commit" help:"PostgreSQL store: synchronous_commit for this store's connections (on, off, local, remote_write, remote_apply); empty = the server's. off trades durability for latency: a database crash may lose the last moments' claims and completions, so a retry may run again (docs/stores.md)"`
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
	sweep := p.SweepInterval
	if sweep == 0 {
		sweep = -1 // 0: never by this instance
	}
	ps, err := pgstore.New(pctx, pool, pgstore.Options{Table: p.Table, SkipCreateSchema: !p.CreateSchema,
		SweepInterval: sweep, LocalCache: p.LocalCache})
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
