package caddymodule

import (
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/redis/go-redis/v9"
)

// stores keeps memory stores and Redis clients alive across config reloads: Caddy
// provisions the new config before cleaning up the old one, so a store used by
// both is never closed, and in-flight locks and stored responses survive.
var pool = caddy.NewUsagePool()

// pooled is one shared memory store or Redis client.
type pooled struct {
	mem    *memstore.Store
	client redis.UniversalClient
}

// Destruct implements caddy.Destructor: the last config using it is gone.
func (p *pooled) Destruct() error {
	if p.mem != nil {
		return p.mem.Close()
	}
	return p.client.Close()
}

// MemoryStore keeps records in this process: the default. Every site and handler
// that configures the same bounds shares one store.
type MemoryStore struct {
	// Most records kept; the oldest completed ones are evicted first, in-flight
	// locks never. Default: 1000000.
	MaxRecords int64 `json:"max_records,omitempty"`
	// Most bytes kept (approximate). Default: 512MiB.
	MaxBytes middleware.Size `json:"max_bytes,omitempty"`

	key   string
	store cache.Store
}

// CaddyModule returns the Caddy module information.
func (*MemoryStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.memory",
		New: func() caddy.Module { return new(MemoryStore) },
	}
}

// Provision gets the shared store, creating it on first use.
func (m *MemoryStore) Provision(caddy.Context) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.MaxRecords == 0 {
		m.MaxRecords = stores.DefaultMemoryMaxRecords
	}
	if m.MaxBytes == 0 {
		m.MaxBytes = stores.DefaultMemoryMaxBytes
	}
	m.key = fmt.Sprintf("memory/%d/%d", m.MaxRecords, m.MaxBytes)
	v, _, err := pool.LoadOrNew(m.key, func() (caddy.Destructor, error) {
		s, err := stores.OpenMemory(m.MaxRecords, int64(m.MaxBytes))
		if err != nil {
			return nil, err
		}
		return &pooled{mem: s}, nil
	})
	if err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	m.store = v.(*pooled).mem
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
	// Prefix of every key this store writes. Default: "idem:".
	Prefix string `json:"prefix,omitempty"`
	// Start even when Redis's maxmemory-policy may evict keys (in-flight locks
	// included, so a duplicate could run while the first runs). Default: false,
	// and provisioning fails on an evicting policy.
	AllowEviction bool `json:"allow_eviction,omitempty"`

	key   string
	store *redisstore.Store
}

// CaddyModule returns the Caddy module information.
func (*RedisStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency.stores.redis",
		New: func() caddy.Module { return new(RedisStore) },
	}
}

// Provision connects, or reuses the client of the previous config.
func (r *RedisStore) Provision(ctx caddy.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Prefix == "" {
		r.Prefix = stores.DefaultRedisPrefix
	}
	url := caddy.NewReplacer().ReplaceAll(r.URL, "")
	if err := stores.Check(stores.Spec{URL: url, RedisPrefix: r.Prefix}); err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	r.key = "redis/" + url
	v, _, err := pool.LoadOrNew(r.key, func() (caddy.Destructor, error) {
		client, err := stores.DialRedis(ctx, url)
		var unreachable *stores.UnreachableError
		switch {
		case errors.As(err, &unreachable):
			// Not fatal: Redis may come up after Caddy. Requests fail closed
			// (or open) until it answers.
			ctx.Slogger().Warn("idempotency: Redis unreachable at start-up", "url", unreachable.URL, "error", unreachable.Err)
		case err != nil:
			return nil, err
		default:
			if err := stores.EnforceNoEviction(ctx, client, r.AllowEviction, ctx.Slogger().Warn); err != nil {
				client.Close()
				return nil, err
			}
		}
		return &pooled{client: client}, nil
	})
	if err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	// The client is shared; the store on top of it is per config (prefixes may differ).
	if r.store, err = redisstore.New(v.(*pooled).client, redisstore.WithPrefix(r.Prefix)); err != nil {
		_, _ = pool.Delete(r.key)
		return fmt.Errorf("redis store: %w", err)
	}
	return nil
}

// Validate implements caddy.Validator.
func (r *RedisStore) Validate() error {
	if r.URL == "" {
		return fmt.Errorf("redis store: url is required")
	}
	return nil
}

// Cleanup stops this config's pub/sub subscription and releases its use of the
// client.
func (r *RedisStore) Cleanup() error {
	if r.store != nil {
		r.store.Close()
	}
	_, err := pool.Delete(r.key)
	return err
}

// IdempotencyStore implements StoreModule.
func (r *RedisStore) IdempotencyStore() cache.Store { return r.store }

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
)
