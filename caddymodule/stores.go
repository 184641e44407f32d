package caddymodule

import (
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
)

// pool keeps stores alive across config reloads. Caddy provisions the new config
// before it cleans up the old one, so a store both use is never let go; and a
// store no config uses any more is closed only once the last request using it
// (and its background completion) is done, for a reload does not wait for the
// old config's requests.
var pool = caddy.NewUsagePool()

// pooled counts the users of one shared store. With the store it implements
// cache.Holder (the core holds it for every request) and caddy.Destructor, which
// closes the store only when no hold is out.
type pooled struct {
	close func() error

	mu       sync.Mutex
	holds    int
	released bool // no config uses it: close at the last release
	closed   bool
}

// Hold implements cache.Holder.
func (p *pooled) Hold() func() {
	p.mu.Lock()
	p.holds++
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(p.release) }
}

func (p *pooled) release() {
	p.mu.Lock()
	p.holds--
	closeNow := p.released && p.holds == 0 && !p.closed
	p.closed = p.closed || closeNow
	p.mu.Unlock()
	if closeNow {
		_ = p.close()
	}
}

// Destruct implements caddy.Destructor: the last config using the store is gone.
// It closes the store now, or at the release of the last hold.
func (p *pooled) Destruct() error {
	p.mu.Lock()
	p.released = true
	closeNow := p.holds == 0 && !p.closed
	p.closed = p.closed || closeNow
	p.mu.Unlock()
	if closeNow {
		return p.close()
	}
	return nil
}

// pooledMemory and pooledRedis are the pooled stores, each embedding its concrete
// store so the core still sees its optional interfaces (cache.Notifier,
// cache.InProcess).
type pooledMemory struct {
	*memstore.Store
	*pooled
}

type pooledRedis struct {
	*redisstore.Store
	*pooled
}

type pooledPostgres struct {
	*pgstore.Store
	*pooled
}

// MemoryStore keeps records in this process: the default. There is one memory
// store per process, shared by every site and handler and kept across reloads;
// a reload that changes its bounds applies them to the live store, whose records
// stay.
type MemoryStore struct {
	// Most records kept, shared between client scopes: a scope's completed
	// records are evicted only for its own volume or while it holds more
	// than its share; in-flight locks never. Default: 1000000.
	MaxRecords int64 `json:"max_records,omitempty"`
	// Most bytes kept (approximate). Default: 512MiB.
	MaxBytes middleware.Size `json:"max_bytes,omitempty"`

	store *pooledMemory
}

// memoryKey is the pool key of the process's memory store.
const memoryKey = "memory"

// CaddyModule returns the Caddy module information.
func (*MemoryStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.memory",
		New: func() caddy.Module { return new(MemoryStore) },
	}
}

// Provision gets the shared store, creating it on first use, and applies this
// config's bounds to it.
func (m *MemoryStore) Provision(ctx caddy.Context) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.MaxRecords == 0 {
		m.MaxRecords = stores.DefaultMemoryMaxRecords
	}
	if m.MaxBytes == 0 {
		m.MaxBytes = stores.DefaultMemoryMaxBytes
	}
	v, _, err := pool.LoadOrNew(memoryKey, func() (caddy.Destructor, error) {
		s, err := stores.OpenMemory(m.MaxRecords, int64(m.MaxBytes))
		if err != nil {
			return nil, err
		}
		return pooledMemory{Store: s, pooled: &pooled{close: s.Close}}, nil
	})
	if err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	pm := v.(pooledMemory)
	m.store = &pm
	mem := pm.Store
	if recs, bytes := mem.Bounds(); recs != m.MaxRecords || bytes != int64(m.MaxBytes) {
		ctx.Slogger().Info("idempotency: memory store bounds changed; applied to the live store, its records kept",
			"max_records", m.MaxRecords, "max_bytes", m.MaxBytes.String(), "was_max_records", recs, "was_max_bytes", middleware.Size(bytes).String())
		if err := mem.SetBounds(m.MaxRecords, int64(m.MaxBytes)); err != nil {
			_, _ = pool.Delete(memoryKey)
			return fmt.Errorf("memory store: %w", err)
		}
	}
	return nil
}

// Validate implements caddy.Validator.
func (m *MemoryStore) Validate() error {
	if m.MaxRecords < 0 || m.MaxBytes < 0 {
		return fmt.Errorf("memory store: bounds must not be negative")
	}
	return nil
}

// Cleanup releases this config's use of the store.
func (m *MemoryStore) Cleanup() error {
	_, err := pool.Delete(memoryKey)
	return err
}

// IdempotencyStore implements StoreModule.
func (m *MemoryStore) IdempotencyStore() cache.Store { return m.store }

// RedisStore keeps records in Redis, shared by every instance pointing at it.
type RedisStore struct {
	// The server: redis://[user:password@]host:port[/db][?options], rediss://
	// (TLS), redis+cluster://host:port?addr=host2:port…, or
	// redis+sentinel://host:port?master_name=NAME. Options are go-redis's:
	// dial_timeout, read_timeout, write_timeout, pool_size, … Placeholders such
	// as {env.REDIS_URL} are replaced. Required.
	URL string `json:"url,omitempty"`
	// Prefix of every key this store writes. Default: "idem:".
	Prefix string `json:"prefix,omitempty"`
	// Start even when Redis's maxmemory-policy may evict keys (in-flight locks
	// included, so a duplicate could run while the first runs). Default: false,
	// and provisioning fails on an evicting policy.
	AllowEviction bool `json:"allow_eviction,omitempty"`
	// Replicas that must acknowledge every write (Redis WAIT) before a request
	// is forwarded or answered; too few within WaitTimeout is a store error
	// (503, nothing forwarded). Default: 0, wait for none.
	WaitReplicas int64 `json:"wait_replicas,omitempty"`
	// How long a write waits for WaitReplicas. Default: 250ms.
	WaitTimeout caddy.Duration `json:"wait_timeout,omitempty"`

	key   string
	store *pooledRedis
}

// CaddyModule returns the Caddy module information.
func (*RedisStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.redis",
		New: func() caddy.Module { return new(RedisStore) },
	}
}

// Provision connects, or reuses the store of the previous config: one store
// (client, pipelines and pub/sub) per URL and prefix, kept across reloads.
func (r *RedisStore) Provision(ctx caddy.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Prefix == "" {
		r.Prefix = stores.DefaultRedisPrefix
	}
	if r.WaitTimeout == 0 {
		r.WaitTimeout = caddy.Duration(stores.DefaultRedisWaitTimeout)
	}
	url := caddy.NewReplacer().ReplaceAll(r.URL, "")
	spec := stores.Spec{URL: url, RedisPrefix: r.Prefix, RedisAllowEviction: r.AllowEviction,
		RedisWaitReplicas: r.WaitReplicas, RedisWaitTimeout: time.Duration(r.WaitTimeout), Warn: ctx.Slogger().Warn}
	if err := stores.Check(spec); err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	// One store per URL, prefix and replication wait: configs that agree share it.
	r.key = fmt.Sprintf("redis/%s/wait=%d,%v/%s", r.Prefix, r.WaitReplicas, time.Duration(r.WaitTimeout), url)
	v, _, err := pool.LoadOrNew(r.key, func() (caddy.Destructor, error) {
		s, closeFn, err := stores.OpenRedis(ctx, spec, true)
		if err != nil {
			return nil, err
		}
		return pooledRedis{Store: s, pooled: &pooled{close: closeFn}}, nil
	})
	if err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	pr := v.(pooledRedis)
	r.store = &pr
	return nil
}

// Validate implements caddy.Validator.
func (r *RedisStore) Validate() error {
	if r.URL == "" {
		return fmt.Errorf("redis store: url is required")
	}
	return nil
}

// Cleanup releases this config's use of the store; it closes when no config and
// no request uses it.
func (r *RedisStore) Cleanup() error {
	_, err := pool.Delete(r.key)
	return err
}

// IdempotencyStore implements StoreModule.
func (r *RedisStore) IdempotencyStore() cache.Store { return r.store }

// PostgresStore keeps records in a PostgreSQL table: durable, shared by every
// instance pointing at it.
type PostgresStore struct {
	// The database: postgres://[user[:password]@]host[:port]/dbname[?options]
	// (or postgresql://). Options are pgx's and libpq's: sslmode,
	// pool_max_conns, connect_timeout, … Placeholders such as
	// {env.DATABASE_URL} are replaced. Required.
	URL string `json:"url,omitempty"`
	// The table, schema.name allowed. Default: idemproxy_records.
	Table string `json:"table,omitempty"`
	// Create the table and its index at provisioning when missing. Default:
	// true; false requires them to exist (idemproxy migrate prints the DDL).
	CreateSchema *bool `json:"create_schema,omitempty"`
	// How often expired rows are deleted, in small batches; 0 turns the
	// sweeper off. Default: 1m.
	SweepInterval *caddy.Duration `json:"sweep_interval,omitempty"`

	key   string
	store *pooledPostgres
}

// CaddyModule returns the Caddy module information.
func (*PostgresStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.postgres",
		New: func() caddy.Module { return new(PostgresStore) },
	}
}

// Provision connects, or reuses the store of the previous config: one store
// (pool, sweeper, listener) per URL and settings, kept across reloads.
func (p *PostgresStore) Provision(ctx caddy.Context) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Table == "" {
		p.Table = stores.DefaultPostgresTable
	}
	spec := stores.Spec{URL: caddy.NewReplacer().ReplaceAll(p.URL, ""), PostgresTable: p.Table, PostgresCreateSchema: true,
		PostgresSweepInterval: stores.DefaultPostgresSweepInterval, Warn: ctx.Slogger().Warn}
	if p.CreateSchema != nil {
		spec.PostgresCreateSchema = *p.CreateSchema
	}
	if p.SweepInterval != nil {
		spec.PostgresSweepInterval = time.Duration(*p.SweepInterval)
	}
	if err := stores.Check(spec); err != nil {
		return fmt.Errorf("postgres store: %w", err)
	}
	p.key = fmt.Sprintf("postgres/%s/schema=%v,sweep=%v/%s", p.Table, spec.PostgresCreateSchema, spec.PostgresSweepInterval, spec.URL)
	v, _, err := pool.LoadOrNew(p.key, func() (caddy.Destructor, error) {
		s, closeFn, err := stores.OpenPostgres(ctx, spec)
		if err != nil {
			return nil, err
		}
		return pooledPostgres{Store: s, pooled: &pooled{close: closeFn}}, nil
	})
	if err != nil {
		return fmt.Errorf("postgres store: %w", err)
	}
	pp := v.(pooledPostgres)
	p.store = &pp
	return nil
}

// Validate implements caddy.Validator.
func (p *PostgresStore) Validate() error {
	if p.URL == "" {
		return fmt.Errorf("postgres store: url is required")
	}
	if p.Table != "" {
		if err := pgstore.CheckTable(p.Table); err != nil {
			return fmt.Errorf("postgres store: %w", err)
		}
	}
	if p.SweepInterval != nil && *p.SweepInterval < 0 {
		return fmt.Errorf("postgres store: sweep_interval must not be negative")
	}
	return nil
}

// Cleanup releases this config's use of the store; it closes when no config and
// no request uses it.
func (p *PostgresStore) Cleanup() error {
	_, err := pool.Delete(p.key)
	return err
}

// IdempotencyStore implements StoreModule.
func (p *PostgresStore) IdempotencyStore() cache.Store { return p.store }

// Interface guards.
var (
	_ caddy.Provisioner  = (*MemoryStore)(nil)
	_ caddy.Validator    = (*MemoryStore)(nil)
	_ caddy.CleanerUpper = (*MemoryStore)(nil)
	_ StoreModule        = (*MemoryStore)(nil)
	_ caddy.Provisioner  = (*RedisStore)(nil)
	_ caddy.Validator    = (*RedisStore)(nil)
	_ caddy.CleanerUpper = (*RedisStore)(nil)
	_ StoreModule        = (*RedisStore)(nil)
	_ cache.Holder       = (*pooledMemory)(nil)
	_ cache.InProcess    = (*pooledMemory)(nil)
	_ cache.Notifier     = (*pooledMemory)(nil)
	_ cache.Holder       = (*pooledRedis)(nil)
	_ cache.Notifier     = (*pooledRedis)(nil)
	_ caddy.Provisioner  = (*PostgresStore)(nil)
	_ caddy.Validator    = (*PostgresStore)(nil)
	_ caddy.CleanerUpper = (*PostgresStore)(nil)
	_ StoreModule        = (*PostgresStore)(nil)
	_ cache.Holder       = (*pooledPostgres)(nil)
	_ cache.Notifier     = (*pooledPostgres)(nil)
)
