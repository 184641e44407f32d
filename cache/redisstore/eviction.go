package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// EvictionError is CheckEviction's answer for a Redis whose maxmemory-policy
// may evict the store's keys, in-flight claims included: at its memory limit
// Redis would drop a claim, and a duplicate would run while the first still runs.
type EvictionError struct {
	Policy string // the server's maxmemory-policy
}

func (e *EvictionError) Error() string {
	return fmt.Sprintf("Redis maxmemory-policy is %s: at its memory limit Redis may evict in-flight locks, and a duplicate would run while the first still runs; set it to noeviction (CONFIG SET maxmemory-policy noeviction), or allow eviction explicitly", e.Policy)
}

// CheckEviction reads Redis's maxmemory-policy on every primary the client
// reaches (each of a Cluster's). It answers an *EvictionError for any policy but
// noeviction (every key the store writes has a TTL, so the volatile-* policies
// evict them too), and another error when the server does not say: CONFIG
// refused, as on managed Redis, or Redis unreachable. New does not call it (it
// does not dial); call it at start-up, refuse to start on an *EvictionError,
// and decide what an unanswered check means for you (the proxy and Caddy log
// it and go on).
func CheckEviction(ctx context.Context, client redis.UniversalClient) error {
	check := func(ctx context.Context, c redis.Cmdable) error {
		res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return fmt.Errorf("reading maxmemory-policy: %w", err)
		}
		if p, ok := res["maxmemory-policy"]; ok && p != "noeviction" {
			return &EvictionError{Policy: p}
		}
		return nil
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	}
	return check(ctx, client)
}

// enforceNoEviction applies CheckEviction's answer: an evicting policy is an error
// unless allowed (then a warning); an unanswered check is a warning.
func enforceNoEviction(ctx context.Context, client redis.UniversalClient, allow bool, warn func(string, ...any)) error {
	err := CheckEviction(ctx, client)
	var ev *EvictionError
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
