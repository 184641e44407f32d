package caddymodule

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
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

// storeFields are the settings of each store module, from its description in
// internal/stores: its JSON members and its Caddyfile block's lines.
var storeFields = map[string][]conf.Field{
	"memory":   conf.Fields(reflect.TypeFor[stores.Memory]()),
	"redis":    conf.Fields(reflect.TypeFor[stores.Redis]()),
	"postgres": conf.Fields(reflect.TypeFor[stores.Postgres]()),
	"dynamodb": conf.Fields(reflect.TypeFor[stores.DynamoDB]()),
}

// storeLocators name the JSON member (and the Caddyfile argument) that says
// where a store is: a URL, or DynamoDB's table. The memory store has none.
var storeLocators = map[string]string{"redis": "url", "postgres": "url", "dynamodb": "table"}

// decodeStore reads a store module's JSON: its settings by name, and its
// locator (url, table) when it has one.
func decodeStore(kind string, b []byte, settings any, loc *string) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	locName := storeLocators[kind]
	if raw, ok := obj[locName]; ok && loc != nil {
		if err := json.Unmarshal(raw, loc); err != nil {
			return fmt.Errorf("%s store: %s: %w", kind, locName, err)
		}
	}
	err := conf.DecodeJSON(storeFields[kind], settings, obj, func(name string) bool {
		return name == "type" || name == locName && loc != nil
	})
	if err != nil {
		return fmt.Errorf("%s store: %w", kind, err)
	}
	return nil
}

// encodeStore writes a store module's JSON: its locator (url, table), and the
// settings that differ from their defaults.
func encodeStore(kind string, settings, defaults any, loc string) ([]byte, error) {
	obj := conf.EncodeJSON(storeFields[kind], settings, func(f conf.Field) bool { return !f.Equal(settings, defaults) })
	if loc != "" {
		obj[storeLocators[kind]] = loc
	}
	return json.Marshal(obj)
}

// MemoryStore keeps records in this process: the default. There is one memory
// store per process, shared by every site and handler and kept across reloads;
// a reload that changes its settings applies them to the live store, whose
// records and in-flight locks stay (internal/stores/reload.go).
type MemoryStore struct {
	// The store's settings: max_records, max_bytes (internal/stores.Memory).
	stores.Memory

	key   string
	store *pooledMemory
}

// CaddyModule returns the Caddy module information.
func (*MemoryStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.memory",
		New: func() caddy.Module { return &MemoryStore{Memory: stores.DefaultMemory()} },
	}
}

// UnmarshalJSON reads the module's settings over their defaults.
func (m *MemoryStore) UnmarshalJSON(b []byte) error { return decodeStore("memory", b, &m.Memory, nil) }

// MarshalJSON writes the settings that differ from their defaults.
func (m MemoryStore) MarshalJSON() ([]byte, error) {
	def := stores.DefaultMemory()
	return encodeStore("memory", &m.Memory, &def, "")
}

// Provision gets the shared store, creating it on first use, and applies this
// config's settings to it.
func (m *MemoryStore) Provision(ctx caddy.Context) error {
	if err := m.Validate(); err != nil {
		return err
	}
	// The same for every memory config: its settings are all live.
	m.key = stores.Settings{Memory: m.Memory}.Key("memory")
	v, _, err := pool.LoadOrNew(m.key, func() (caddy.Destructor, error) {
		s, err := m.Memory.Open()
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
	was := stores.RunningMemory(pm.Store)
	changed, err := m.Memory.Apply(pm.Store)
	if err != nil {
		_, _ = pool.Delete(m.key)
		return fmt.Errorf("memory store: %w", err)
	}
	if len(changed) > 0 {
		ctx.Slogger().Info("idempotency: memory store settings changed; applied to the live store, its records and in-flight locks kept",
			"settings", strings.Join(changed, ", "), "max_records", m.MaxRecords, "max_bytes", conf.FormatSize(m.MaxBytes),
			"was_max_records", was.MaxRecords, "was_max_bytes", conf.FormatSize(was.MaxBytes))
	}
	return nil
}

// Validate implements caddy.Validator.
func (m *MemoryStore) Validate() error { return m.Memory.Validate() }

// Cleanup releases this config's use of the store.
func (m *MemoryStore) Cleanup() error {
	_, err := pool.Delete(m.key)
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
	// The store's settings: prefix, allow_eviction, wait_replicas,
	// wait_timeout (internal/stores.Redis).
	stores.Redis

	key   string
	store *pooledRedis
}

// CaddyModule returns the Caddy module information.
func (*RedisStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.redis",
		New: func() caddy.Module { return &RedisStore{Redis: stores.DefaultRedis()} },
	}
}

// UnmarshalJSON reads the module's url and settings over their defaults.
func (r *RedisStore) UnmarshalJSON(b []byte) error { return decodeStore("redis", b, &r.Redis, &r.URL) }

// MarshalJSON writes the url and the settings that differ from their defaults.
func (r RedisStore) MarshalJSON() ([]byte, error) {
	def := stores.DefaultRedis()
	return encodeStore("redis", &r.Redis, &def, r.URL)
}

// Provision connects, or reuses the store of the previous config: one store
// (client, pipelines and pub/sub) per URL and settings, kept across reloads.
func (r *RedisStore) Provision(ctx caddy.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	url := caddy.NewReplacer().ReplaceAll(r.URL, "")
	// One store per URL and settings: configs that agree share it.
	r.key = stores.Settings{Redis: r.Redis}.Key(url)
	v, _, err := pool.LoadOrNew(r.key, func() (caddy.Destructor, error) {
		s, closeFn, err := r.Redis.Open(ctx, url, stores.Env{Warn: ctx.Slogger().Warn, StartUnreachable: true})
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
	return r.Redis.Validate(caddy.NewReplacer().ReplaceAll(r.URL, ""))
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
	// The store's settings: table, create_schema, sweep_interval
	// (internal/stores.Postgres).
	stores.Postgres

	key   string
	store *pooledPostgres
}

// CaddyModule returns the Caddy module information.
func (*PostgresStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.postgres",
		New: func() caddy.Module { return &PostgresStore{Postgres: stores.DefaultPostgres()} },
	}
}

// UnmarshalJSON reads the module's url and settings over their defaults.
func (p *PostgresStore) UnmarshalJSON(b []byte) error {
	return decodeStore("postgres", b, &p.Postgres, &p.URL)
}

// MarshalJSON writes the url and the settings that differ from their defaults.
func (p PostgresStore) MarshalJSON() ([]byte, error) {
	def := stores.DefaultPostgres()
	return encodeStore("postgres", &p.Postgres, &def, p.URL)
}

// Provision connects, or reuses the store of the previous config: one store
// (pool, sweeper, listener) per URL and settings, kept across reloads.
func (p *PostgresStore) Provision(ctx caddy.Context) error {
	if err := p.Validate(); err != nil {
		return err
	}
	url := caddy.NewReplacer().ReplaceAll(p.URL, "")
	p.key = stores.Settings{Postgres: p.Postgres}.Key(url)
	v, _, err := pool.LoadOrNew(p.key, func() (caddy.Destructor, error) {
		s, closeFn, err := p.Postgres.Open(ctx, url, stores.Env{Warn: ctx.Slogger().Warn})
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
	return p.Postgres.Validate(caddy.NewReplacer().ReplaceAll(p.URL, ""))
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
