package redisstore

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idemproxy/idemproxy/cache"
)

// NewClient opens a client from a URL. The forms:
//
//	redis://[user:password@]host:port[/db][?options]             one node
//	rediss://…                                                   one node over TLS
//	redis+cluster://[user:password@]host:port[?addr=host2:port&addr=…&options]
//	rediss+cluster://…                                           Cluster over TLS
//	redis+sentinel://[user:password@]sentinel:port[/db]?master_name=NAME[&addr=sentinel2:port…&options]
//	rediss+sentinel://…                                          Sentinel over TLS
//
// Options are go-redis's own, in snake case: dial_timeout, read_timeout,
// write_timeout, pool_size, min_idle_conns, max_retries, … (see go-redis ParseURL,
// ParseClusterURL and ParseFailoverURL); unknown options are errors. Durations
// take Go syntax ("500ms"); a bare number is seconds. The caller closes the client.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis URL: %w", redactErr(err, rawURL))
	}
	base, mode, _ := strings.Cut(u.Scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("redis URL: scheme %q: want redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel", u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("redis URL: no host")
	}
	u.Scheme = base
	plain := u.String()
	switch mode {
	case "":
		o, err := redis.ParseURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis URL: %w", redactErr(err, plain))
		}
		return redis.NewClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis cluster URL: %w", redactErr(err, plain))
		}
		return redis.NewClusterClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis sentinel URL: %w", redactErr(err, plain))
		}
		if o.MasterName == "" {
			return nil, fmt.Errorf("redis sentinel URL: master_name is required")
		}
		return redis.NewFailoverClient(o), nil
	}
	return nil, fmt.Errorf("redis URL: scheme %q: unknown mode %q", u.Scheme+"+"+mode, mode)
}

// Redact returns the URL with its secrets replaced (cache.RedactURL), for
// logs and errors.
func Redact(rawURL string) string {
	if _, err := url.Parse(rawURL); err != nil {
		return "(unparseable URL)"
	}
	return cache.RedactURL(rawURL)
}

// redactErr keeps the URL's secrets out of error messages that quote it.
func redactErr(err error, rawURL string) error {
	if _, perr := url.Parse(rawURL); perr != nil {
		return fmt.Errorf("malformed URL")
	}
	return cache.RedactError(err, rawURL)
}

// dial opens a client from its URL (NewClient) and checks that it answers
// within cache.PingTimeout. On a failed check it returns the client (usable
// once Redis is up) with a *cache.UnreachableError.
func dial(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	client, err := NewClient(rawURL)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, cache.PingTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		return client, &cache.UnreachableError{Store: Driver.Title, URL: Redact(rawURL), Err: err}
	}
	return client, nil
}
