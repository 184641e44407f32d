package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemproxy/idemproxy/cache"
)

// Kind describes the PostgreSQL store to the programs that open stores from
// configuration (idemproxy, the Caddy module, idemproxy migrate): a
// postgres:// URL, pgx's, selects it. Open gives cache.Env.Instrument the
// *pgx.ConnConfig of its pool, before the first connection.
var Kind = cache.Kind{
	Name:     "postgres",
	Title:    "PostgreSQL",
	Schemes:  []string{"postgres", "postgresql"},
	Locator:  "url",
	Help:     "a postgres:// (postgresql://) URL",
	Settings: func() cache.Settings { s := DefaultSettings(); return &s },
}

// Settings are the PostgreSQL store's settings from configuration: durable,
// shared by every instance pointing at the same database.
type Settings struct {
	// Table is the table, schema.name allowed.
	Table string `json:"table" schema:"" help:"PostgreSQL store: the table (schema.name allowed)"`
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

// DefaultSettings are the PostgreSQL store's defaults.
func DefaultSettings() Settings {
	return Settings{Table: DefaultTable, CreateSchema: true, SweepInterval: DefaultSweepInterval}
}

// Check implements cache.Settings.
func (p *Settings) Check() error {
	if err := CheckTable(p.Table); err != nil {
		return &cache.FieldError{Store: Kind.Name, Field: "table", Err: err}
	}
	if p.SweepInterval < 0 {
		return cache.FieldErrorf(Kind.Name, "sweep_interval", "must not be negative, got %v", p.SweepInterval)
	}
	if p.LocalCache < 0 {
		return cache.FieldErrorf(Kind.Name, "local_cache", "must not be negative, got %d", p.LocalCache)
	}
	if p.SynchronousCommit != "" && !slices.Contains(synchronousCommit, p.SynchronousCommit) {
		return cache.FieldErrorf(Kind.Name, "synchronous_commit", "want one of %s, or empty for the server's, got %q", strings.Join(synchronousCommit, ", "), p.SynchronousCommit)
	}
	return nil
}

// Validate implements cache.Settings: p, and the URL (parsed only; nothing
// is dialled).
func (p *Settings) Validate(rawURL string) error {
	if err := p.Check(); err != nil {
		return err
	}
	_, err := poolConfig(rawURL)
	return err
}

func poolConfig(rawURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres URL %s: %w", cache.RedactURL(rawURL), cache.RedactError(err, rawURL))
	}
	return cfg, nil
}

// Open implements cache.Settings: a pool, a check that the server answers
// within cache.PingTimeout, the schema (created, or checked), and the store,
// with the function that closes the store and then the pool.
func (p *Settings) Open(ctx context.Context, rawURL string, env cache.Env) (cache.Store, func() error, error) {
	if err := p.Check(); err != nil {
		return nil, nil, err
	}
	cfg, err := poolConfig(rawURL)
	if err != nil {
		return nil, nil, err
	}
	if env.Instrument != nil {
		if err := env.Instrument(cfg.ConnConfig); err != nil {
			return nil, nil, fmt.Errorf("tracing PostgreSQL: %w", err)
		}
	}
	if p.SynchronousCommit != "" { // every connection's start-up parameter, overriding the URL's
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = p.SynchronousCommit
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres URL %s: %w", cache.RedactURL(rawURL), cache.RedactError(err, rawURL))
	}
	pctx, cancel := context.WithTimeout(ctx, cache.PingTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, nil, &cache.UnreachableError{Store: Kind.Title, URL: cache.RedactURL(rawURL), Err: cache.RedactError(err, rawURL)}
	}
	sweep := p.SweepInterval
	if sweep == 0 {
		sweep = -1 // the setting's 0: never by this instance
	}
	ps, err := New(pctx, pool, Options{Table: p.Table, SkipCreateSchema: !p.CreateSchema, SweepInterval: sweep, LocalCache: p.LocalCache})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return ps, func() error { err := ps.Close(); pool.Close(); return err }, nil
}

// Schema implements cache.SchemaSettings: the DDL of p.Table (Schema).
func (p *Settings) Schema(string) (string, error) {
	ddl, err := Schema(p.Table)
	if err != nil {
		return "", &cache.FieldError{Store: Kind.Name, Field: "table", Err: err}
	}
	return ddl, nil
}

// Migrate implements cache.SchemaSettings: it runs the DDL of p.Table on the
// database at rawURL, on one connection. It takes no exclusive lock.
func (p *Settings) Migrate(ctx context.Context, rawURL string, _ cache.Env) (string, error) {
	ddl, err := p.Schema(rawURL)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return "", fmt.Errorf("%s: %s", cache.RedactURL(rawURL), cache.RedactError(err, rawURL))
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, ddl); err != nil {
		return "", err
	}
	return "table " + p.Table, nil
}

var _ cache.SchemaSettings = (*Settings)(nil)
