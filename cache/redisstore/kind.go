package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/internal/localcache"
	"github.com/redis/go-redis/v9"
)

// Driver describes the Redis store to the programs that open stores from
// configuration (idemproxy, the Caddy module): a redis:// URL (NewClient's
// forms) selects it. Open gives cache.Env.Instrument the
// redis.UniversalClient, before its first command.
var Driver = cache.Driver{
	Name:     "redis",
	Title:    "Redis",
	Schemes:  []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"},
	Locator:  "url",
	Help:     "a redis://, rediss://, redis+cluster:// or redis+sentinel:// URL",
	Settings: func() cache.Settings { s := DefaultSettings(); return &s },
}

// Settings are the Redis store's settings from configuration: shared by every
// instance pointing at the same Redis.
type Settings struct {
	// Prefix of every Redis key.
	//
	// Default: idem:.
	Prefix string `json:"prefix"`

	// Start even when Redis's maxmemory-policy may evict keys (in-flight claims
	// included, so that a duplicate could run while the first runs); by default
	// idemproxy refuses (see docs/stores.md#redis).
	//
	// Default: false.
	AllowEviction bool `json:"allow_eviction" go:"'redisstore.CheckEviction', which 'redisstore.New' leaves to its caller"`

	// Replicas that must acknowledge every write (Redis WAIT, same round trip)
	// before a request is forwarded or answered; too few within
	// redis_wait_timeout is a store error ('503', nothing forwarded). '0': none
	// (see docs/stores.md#redis).
	//
	// Default: 0.
	WaitReplicas int64 `json:"wait_replicas"`

	// How long a write waits for redis_wait_replicas.
	//
	// Default: 250ms.
	WaitTimeout time.Duration `json:"wait_timeout"`

	// Bytes of completed records kept in each instance's memory, so that a
	// replay costs no round trip; exact across instances through pub/sub, and a
	// delete or resolve waits 200ms for every instance's cache (see
	// docs/stores.md#local-cache-of-completed-records). 'auto': a sixteenth of
	// the process's memory budget (GOMEMLIMIT, else its cgroup's memory limit),
	// between 8MiB and 256MiB, 64MiB without a budget; off with Redis Cluster,
	// whose pub/sub keeps no single order (a size is refused there). 'off' (or
	// '0B'): none.
	//
	// Default: auto.
	LocalCache int64 `json:"local_cache" unit:"bytes" size:"auto" go:"'redisstore.Options.LocalCache' (auto: 0, off: negative)"`
}

// DefaultSettings are the Redis store's defaults.
func DefaultSettings() Settings {
	return Settings{Prefix: DefaultPrefix, WaitTimeout: DefaultWaitTimeout, LocalCache: localcache.Auto}
}

// Check implements cache.Settings.
func (r *Settings) Check() error {
	switch {
	case r.Prefix == "":
		return cache.FieldErrorf(Driver.Name, "prefix", "must not be empty")
	case r.WaitReplicas < 0:
		return cache.FieldErrorf(Driver.Name, "wait_replicas", "must not be negative, got %d", r.WaitReplicas)
	case r.WaitTimeout < time.Millisecond:
		return cache.FieldErrorf(Driver.Name, "wait_timeout", "must be at least 1ms, got %v", r.WaitTimeout)
	case r.LocalCache < 0 && r.LocalCache != localcache.Auto:
		return cache.FieldErrorf(Driver.Name, "local_cache", "must not be negative, got %d", r.LocalCache)
	}
	return nil
}

// Validate implements cache.Settings: r, and the URL (parsed only; nothing is
// dialled).
func (r *Settings) Validate(rawURL string) error {
	if err := r.Check(); err != nil {
		return err
	}
	client, err := NewClient(rawURL)
	if err != nil {
		return err
	}
	return client.Close()
}

// Open implements cache.Settings: it dials, checks the eviction policy
// (enforceNoEviction), and returns the store with the function that closes it and its
// client (the store first). A Redis that does not answer within
// cache.PingTimeout is an *cache.UnreachableError, unless
// env.StartUnreachable: then a warning, and requests fail (503) until it
// answers.
func (r *Settings) Open(ctx context.Context, rawURL string, env cache.Env) (cache.Store, func() error, error) {
	if err := r.Validate(rawURL); err != nil {
		return nil, nil, err
	}
	client, err := dial(ctx, rawURL)
	var unreachable *cache.UnreachableError
	switch {
	case errors.As(err, &unreachable) && env.StartUnreachable:
		env.Warning("idempotency: Redis unreachable at start-up", "url", unreachable.URL, "error", unreachable.Err)
	case err != nil:
		if client != nil {
			client.Close()
		}
		return nil, nil, err
	default:
		if err := enforceNoEviction(ctx, client, r.AllowEviction, env.Warn); err != nil {
			client.Close()
			return nil, nil, err
		}
	}
	if env.Instrument != nil {
		if err := env.Instrument(client); err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("tracing Redis: %w", err)
		}
	}
	_, cluster := client.(*redis.ClusterClient)
	local, note := r.localCache(cluster, env)
	rs, err := New(client, Options{Prefix: r.Prefix, WaitReplicas: int(r.WaitReplicas), WaitTimeout: r.WaitTimeout, LocalCache: local})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	note()
	return rs, func() error { return errors.Join(rs.Close(), client.Close()) }, nil
}

// localCache is the Options.LocalCache of the setting, and says at start-up
// what it is, once the store opened (note): on, with its size and what the size
// came from, or off and why.
func (r *Settings) localCache(cluster bool, env cache.Env) (int64, func()) {
	switch {
	case r.LocalCache == 0:
		return -1, func() {
			env.Note("idempotency: local cache of completed records off (redis_local_cache off): every replay is a round trip to Redis")
		}
	case r.LocalCache > 0:
		return r.LocalCache, func() {
			env.Note("idempotency: local cache of completed records on", "bytes", r.LocalCache, "from", "redis_local_cache")
		}
	case cluster:
		return -1, func() {
			env.Note("idempotency: local cache of completed records off: Redis Cluster's pub/sub keeps no single order across nodes, so a delete or resolve could not reach every instance's cache in time; every replay is a round trip to Redis")
		}
	}
	size, from := DefaultLocalCache()
	return size, func() {
		env.Note("idempotency: local cache of completed records on (redis_local_cache auto; set a size, or off)", "bytes", size, "from", from)
	}
}

var _ cache.Settings = (*Settings)(nil)
