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
	"github.com/idemproxy/idemproxy/cache/internal/localcache"
)

// Driver describes the PostgreSQL store to the programs that open stores from
// configuration (idemproxy, the Caddy module, idemproxy migrate): a
// postgres:// URL, pgx's, selects it. Open gives cache.Env.Instrument the
// *pgx.ConnConfig of its pool, before the first connection.
var Driver = cache.Driver{
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
	// The PostgreSQL store's table; 'schema.name' allowed.
	//
	// Default: idemproxy_records.
	Table string `json:"table" schema:""`

	// Create the table and its index at start-up when missing; 'false': they
	// must exist ('idemproxy migrate' prints or applies the DDL).
	//
	// Default: true.
	CreateSchema bool `json:"create_schema" go:"'pgstore.Options.SkipCreateSchema', inverted"`

	// How often expired rows are deleted, in batches of 1000; '0': never by this
	// instance (reads ignore expired rows anyway).
	//
	// Default: 1m.
	SweepInterval time.Duration `json:"sweep_interval" go:"'pgstore.Options.SweepInterval' (off: negative)"`

	// Bytes of completed records kept in each instance's memory, so that a
	// replay costs no round trip; exact across instances through LISTEN/NOTIFY,
	// and a delete or resolve waits 200ms for every instance's cache (see
	// docs/stores.md#local-cache-of-completed-records). 'auto': a sixteenth of
	// the process's memory budget (GOMEMLIMIT, else its cgroup's memory limit),
	// between 8MiB and 256MiB, 64MiB without a budget. 'off' (or '0B'): none.
	//
	// Default: auto.
	LocalCache int64 `json:"local_cache" unit:"bytes" size:"auto" go:"'pgstore.Options.LocalCache' (auto: 0, off: negative)"`

	// PostgreSQL's synchronous_commit for the store's connections ('on', 'off',
	// 'local', 'remote_write', 'remote_apply'); empty: the server's ('on' unless
	// configured). 'off' answers before a commit is flushed: a database crash
	// may lose the last moments' claims and completions, and a retry of one then
	// runs again (see docs/stores.md#durability-trade-offs).
	//
	// Default: none.
	SynchronousCommit string `json:"synchronous_commit" go:"the pool's 'ConnConfig.RuntimeParams' ('synchronous_commit')"`
}

// synchronousCommit is what synchronous_commit accepts.
var synchronousCommit = []string{"on", "off", "local", "remote_write", "remote_apply"}

// DefaultSettings are the PostgreSQL store's defaults.
func DefaultSettings() Settings {
	return Settings{Table: DefaultTable, CreateSchema: true, SweepInterval: DefaultSweepInterval, LocalCache: localcache.Auto}
}

// Check implements cache.Settings.
func (p *Settings) Check() error {
	if err := CheckTable(p.Table); err != nil {
		return &cache.FieldError{Store: Driver.Name, Field: "table", Err: err}
	}
	if p.SweepInterval < 0 {
		return cache.FieldErrorf(Driver.Name, "sweep_interval", "must not be negative, got %v", p.SweepInterval)
	}
	if p.LocalCache < 0 && p.LocalCache != localcache.Auto {
		return cache.FieldErrorf(Driver.Name, "local_cache", "must not be negative, got %d", p.LocalCache)
	}
	if p.SynchronousCommit != "" && !slices.Contains(synchronousCommit, p.SynchronousCommit) {
		return cache.FieldErrorf(Driver.Name, "synchronous_commit", "want one of %s, or empty for the server's, got %q", strings.Join(synchronousCommit, ", "), p.SynchronousCommit)
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
		return nil, nil, &cache.UnreachableError{Store: Driver.Title, URL: cache.RedactURL(rawURL), Err: cache.RedactError(err, rawURL)}
	}
	sweep := p.SweepInterval
	if sweep == 0 {
		sweep = -1 // the setting's 0: never by this instance
	}
	local, note := p.localCache(env)
	ps, err := New(pctx, pool, Options{Table: p.Table, SkipCreateSchema: !p.CreateSchema, SweepInterval: sweep, LocalCache: local})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	note()
	return ps, func() error { err := ps.Close(); pool.Close(); return err }, nil
}

// localCache is the Options.LocalCache of the setting, and says at start-up
// what it is, once the store opened (note): on, with its size and what the
// size came from, or off.
func (p *Settings) localCache(env cache.Env) (int64, func()) {
	switch {
	case p.LocalCache == 0:
		return -1, func() {
			env.Note("idempotency: local cache of completed records off (postgres_local_cache off): every replay is a round trip to PostgreSQL")
		}
	case p.LocalCache > 0:
		return p.LocalCache, func() {
			env.Note("idempotency: local cache of completed records on", "bytes", p.LocalCache, "from", "postgres_local_cache")
		}
	}
	size, from := DefaultLocalCache()
	return size, func() {
		env.Note("idempotency: local cache of completed records on (postgres_local_cache auto; set a size, or off)", "bytes", size, "from", from)
	}
}

// Schema implements cache.SchemaSettings: the DDL of p.Table (Schema).
func (p *Settings) Schema(string) (string, error) {
	ddl, err := Schema(p.Table)
	if err != nil {
		return "", &cache.FieldError{Store: Driver.Name, Field: "table", Err: err}
	}
	return ddl, nil
}

// Migrate implements cache.SchemaSettings: it brings p.Table on the database
// at rawURL up to date as New does (the DDL Schema prints, under the same
// advisory lock and lock_timeout), on one connection.
func (p *Settings) Migrate(ctx context.Context, rawURL string, _ cache.Env) (string, error) {
	if err := p.Check(); err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return "", fmt.Errorf("%s: %s", cache.RedactURL(rawURL), cache.RedactError(err, rawURL))
	}
	defer conn.Close(ctx)
	if err := migrate(ctx, conn, p.Table, buildQueries(p.Table)); err != nil {
		return "", err
	}
	return "table " + p.Table, nil
}

var _ cache.SchemaSettings = (*Settings)(nil)
