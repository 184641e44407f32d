package stores

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"

	"github.com/idemproxy/idemproxy/cache/redisstore"
)

// Redis is the Redis store's settings (its URL selects it): shared by every
// instance pointing at the same Redis.
type Redis struct {
	Prefix        string        `json:"prefix" go:"'redisstore.WithPrefix'" help:"prefix of every Redis key"`
	AllowEviction bool          `json:"allow_eviction" help:"start even when Redis's maxmemory-policy may evict keys (in-flight locks included, so that a duplicate could run while the first runs); by default idemproxy refuses (see docs/stores.md#redis)"`
	WaitReplicas  int64         `json:"wait_replicas" go:"'redisstore.WithWaitReplicas'" help:"replicas that must acknowledge every write (Redis WAIT, same round trip) before a request is forwarded or answered; too few within redis_wait_timeout is a store error ('503', nothing forwarded). '0': none (see docs/stores.md#redis)"`
	WaitTimeout   time.Duration `json:"wait_timeout" go:"'redisstore.WithWaitReplicas'" help:"how long a write waits for redis_wait_replicas"`
	LocalCache    int64         `json:"local_cache" unit:"bytes" go:"'redisstore.WithLocalCache'" help:"off when '0'; else bytes of completed records kept in each instance's memory, so that a replay costs no round trip; exact across instances through pub/sub (see docs/stores.md#local-cache-of-completed-records); not with Redis Cluster"`
}

// DefaultRedis is the Redis store's defaults.
func DefaultRedis() Redis {
	return Redis{Prefix: redisstore.DefaultPrefix, WaitTimeout: 250 * time.Millisecond}
}

// Validate checks r and the URL (parsed only; nothing is dialled).
func (r Redis) Validate(rawURL string) error {
	if err := r.Check(); err != nil {
		return err
	}
	client, err := redisstore.NewClient(rawURL)
	if err != nil {
		return err
	}
	return client.Close()
}

// Check checks r's settings, without a URL.
func (r Redis) Check() error {
	switch {
	case r.Prefix == "":
		return fieldErr("redis", "prefix", "must not be empty")
	case r.WaitReplicas < 0:
		return fieldErr("redis", "wait_replicas", "must not be negative, got %d", r.WaitReplicas)
	case r.WaitTimeout < time.Millisecond:
		return fieldErr("redis", "wait_timeout", "must be at least 1ms, got %v", r.WaitTimeout)
	case r.LocalCache < 0:
		return fieldErr("redis", "local_cache", "must not be negative, got %d", r.LocalCache)
	}
	return nil
}

// Open opens the Redis store at the URL: dials, checks the eviction policy, and
// returns the store with the function that closes it and its client (the store
// first). A Redis that does not answer is an error, unless
// env.StartUnreachable: then a warning, and requests fail (503) until it
// answers.
func (r Redis) Open(ctx context.Context, rawURL string, env Env) (*redisstore.Store, func() error, error) {
	if err := r.Validate(rawURL); err != nil {
		return nil, nil, err
	}
	client, err := DialRedis(ctx, rawURL)
	var unreachable *UnreachableError
	switch {
	case errors.As(err, &unreachable) && env.StartUnreachable:
		env.warn("idempotency: Redis unreachable at start-up", "url", unreachable.URL, "error", unreachable.Err)
	case err != nil:
		if client != nil {
			client.Close()
		}
		return nil, nil, err
	default:
		if err := EnforceNoEviction(ctx, client, r.AllowEviction, env.Warn); err != nil {
			client.Close()
			return nil, nil, err
		}
	}
	if env.Trace {
		if err := redisotel.InstrumentTracing(client); err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("tracing Redis: %w", err)
		}
	}
	rs, err := redisstore.New(client, redisstore.WithPrefix(r.Prefix),
		redisstore.WithWaitReplicas(int(r.WaitReplicas), r.WaitTimeout), redisstore.WithLocalCache(r.LocalCache))
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return rs, func() error { return errors.Join(rs.Close(), client.Close()) }, nil
}

// DialRedis opens a Redis client from its URL and checks that it answers within
// PingTimeout. On a failed check it returns the client (usable once Redis is up)
// with an *UnreachableError.
func DialRedis(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	client, err := redisstore.NewClient(rawURL)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		return client, &UnreachableError{Store: "Redis", URL: redisstore.Redact(rawURL), Err: err}
	}
	return client, nil
}

// EnforceNoEviction applies redisstore.CheckEviction's answer: an evicting
// policy is an error unless allowed (then a warning); an unanswered check is a
// warning.
func EnforceNoEviction(ctx context.Context, client redis.UniversalClient, allow bool, warn func(string, ...any)) error {
	err := redisstore.CheckEviction(ctx, client)
	var ev *redisstore.EvictionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ev) && !allow:
		return err
	}
	if warn != nil {
		if ev != nil {
			warn("Redis may evict in-flight locks: eviction allowed by configuration", "maxmemory-policy", ev.Policy)
		} else {
			warn("could not check Redis's maxmemory-policy; make sure it is noeviction", "error", err)
		}
	}
	return nil
}
