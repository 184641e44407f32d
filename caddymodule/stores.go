package caddymodule

import (
	"context"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/redis/go-redis/v9"
)

// stores keeps memory stores and Redis clients alive across config reloads: Caddy
// provisions the new config before cleaning up the old one, so a store used by
// both is never closed, and in-flight locks and stored responses survive.
var stores = caddy.NewUsagePool()

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
	MaxBytes int64 `json:"max_bytes,omitempty"`

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
	if m.MaxRecords == 0 {
		m.MaxRecords = memstore.DefaultMaxRecords
	}
	if m.MaxBytes == 0 {
		m.MaxBytes = memstore.DefaultMaxBytes
	}
	m.key = fmt.Sprintf("memory/%d/%d", m.MaxRecords, m.MaxBytes)
	v, _, err := stores.LoadOrNew(m.key, func() (caddy.Destructor, error) {
		s, err := memstore.New(memstore.WithMaxRecords(m.MaxRecords), memstore.WithMaxBytes(m.MaxBytes))
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
	_, err := stores.Delete(m.key)
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
	if r.Prefix == "" {
		r.Prefix = redisstore.DefaultPrefix
	}
	url := caddy.NewReplacer().ReplaceAll(r.URL, "")
	r.key = "redis/" + url
	v, _, err := stores.LoadOrNew(r.key, func() (caddy.Destructor, error) {
		client, err := redisstore.NewClient(url)
		if err != nil {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := client.Ping(pctx).Err(); err != nil {
			// Not fatal: Redis may come up after Caddy. Requests fail closed
			// (or open) until it answers.
			ctx.Slogger().Warn("idempotency: Redis unreachable at start-up", "url", redisstore.Redact(url), "error", err)
		}
		return &pooled{client: client}, nil
	})
	if err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	// The client is shared; the store on top of it is per config (prefixes may differ).
	r.store = redisstore.New(v.(*pooled).client, redisstore.WithPrefix(r.Prefix))
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
	_, err := stores.Delete(r.key)
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
