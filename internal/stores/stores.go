// Package stores opens an idempotency store from its configuration: the one place
// the proxy and the Caddy module both go through, so a new store is one package
// plus one entry in kinds.
package stores

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
)

// Defaults of the stores' own settings.
const (
	DefaultRedisPrefix      = redisstore.DefaultPrefix
	DefaultMemoryMaxRecords = memstore.DefaultMaxRecords
	DefaultMemoryMaxBytes   = memstore.DefaultMaxBytes
	// DefaultRedisWaitTimeout bounds the wait for replicas when one is asked for.
	DefaultRedisWaitTimeout = 250 * time.Millisecond
	// PingTimeout bounds the reachability check at start-up.
	PingTimeout = 5 * time.Second
	// DefaultPostgresTable is the PostgreSQL store's table.
	DefaultPostgresTable = pgstore.DefaultTable
	// DefaultPostgresSweepInterval is how often expired rows are deleted.
	DefaultPostgresSweepInterval = pgstore.DefaultSweepInterval
)

// Spec selects a store and carries every store's settings; each store reads its own.
type Spec struct {
	URL              string // "memory", or a URL whose scheme names the store
	RedisPrefix      string
	MemoryMaxRecords int64
	MemoryMaxBytes   int64
	// RedisAllowEviction accepts a Redis whose maxmemory-policy may evict keys.
	RedisAllowEviction bool
	// RedisWaitReplicas is how many replicas must acknowledge each write
	// (Redis WAIT), within RedisWaitTimeout; 0 waits for none.
	RedisWaitReplicas int64
	RedisWaitTimeout  time.Duration
	// PostgresTable is the PostgreSQL store's table; PostgresCreateSchema
	// creates it when missing (else it must exist); PostgresSweepInterval is
	// how often expired rows are deleted (0: never, by this instance).
	PostgresTable         string
	PostgresCreateSchema  bool
	PostgresSweepInterval time.Duration
	// Warn receives what Open tolerates but an operator should know.
	Warn func(msg string, args ...any)
	// Trace makes the store's calls spans of the global OpenTelemetry tracer
	// provider: redisotel for Redis, a pgx query tracer for PostgreSQL.
	Trace bool
}

// Kind is a store type: its Caddy module name and the URL schemes that select it.
type Kind struct {
	Name    string
	Schemes []string
}

// Kinds are the stores, by the schemes that select them.
var Kinds = []Kind{
	{Name: "memory", Schemes: []string{"memory"}},
	{Name: "redis", Schemes: []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}},
	{Name: "postgres", Schemes: []string{"postgres", "postgresql"}},
}

// KindOf returns the store kind a URL selects ("memory" alone selects memory).
func KindOf(rawURL string) (string, error) {
	scheme := rawURL
	if i := strings.Index(rawURL, "://"); i >= 0 {
		scheme = rawURL[:i]
	}
	for _, k := range Kinds {
		for _, s := range k.Schemes {
			if strings.EqualFold(scheme, s) {
				return k.Name, nil
			}
		}
	}
	var all []string
	for _, k := range Kinds {
		for _, s := range k.Schemes {
			if s == "memory" {
				all = append(all, s)
			} else {
				all = append(all, s+"://")
			}
		}
	}
	return "", fmt.Errorf("%q: want %s", redisstore.Redact(rawURL), strings.Join(all, ", "))
}

// Check validates spec without opening anything.
func Check(spec Spec) error {
	kind, err := KindOf(spec.URL)
	if err != nil {
		return err
	}
	if spec.RedisWaitReplicas < 0 {
		return fmt.Errorf("redis wait_replicas must not be negative, got %d", spec.RedisWaitReplicas)
	}
	switch kind {
	case "memory":
		if spec.MemoryMaxRecords < 1 || spec.MemoryMaxBytes < 1 {
			return errors.New("memory store bounds must be at least 1")
		}
		if spec.RedisWaitReplicas > 0 {
			return errors.New("redis wait_replicas applies to a Redis store, not memory")
		}
	case "redis":
		if spec.RedisWaitReplicas > 0 && spec.RedisWaitTimeout < time.Millisecond {
			return fmt.Errorf("redis wait_timeout must be at least 1ms when waiting for replicas, got %v", spec.RedisWaitTimeout)
		}
		if spec.RedisPrefix == "" {
			return errors.New("the Redis key prefix must not be empty")
		}
		client, err := redisstore.NewClient(spec.URL) // parses only; nothing is dialled
		if err != nil {
			return err
		}
		client.Close()
	case "postgres":
		if err := pgstore.CheckTable(spec.PostgresTable); err != nil {
			return err
		}
		if spec.PostgresSweepInterval < 0 {
			return fmt.Errorf("postgres sweep_interval must not be negative, got %v", spec.PostgresSweepInterval)
		}
		if _, err := pgxpool.ParseConfig(spec.URL); err != nil {
			return fmt.Errorf("postgres URL %s: %w", Redact(spec.URL), redactErr(err, spec.URL))
		}
	}
	if kind == "postgres" && spec.RedisWaitReplicas > 0 {
		return errors.New("redis wait_replicas applies to a Redis store, not PostgreSQL")
	}
	return nil
}

// redactErr keeps the URL's password out of a parse error that quotes it.
func redactErr(err error, rawURL string) error {
	u, perr := url.Parse(rawURL)
	if perr != nil || u.User == nil {
		return err
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}

// OpenPostgres opens the PostgreSQL store spec selects: a pool, a check that
// the server answers within PingTimeout, the schema (created, or checked), and
// the store, with the function that closes the store and then the pool.
func OpenPostgres(ctx context.Context, spec Spec) (*pgstore.Store, func() error, error) {
	cfg, err := pgxpool.ParseConfig(spec.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres URL %s: %w", Redact(spec.URL), redactErr(err, spec.URL))
	}
	if spec.Trace {
		cfg.ConnConfig.Tracer = newPGTracer()
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres URL %s: %w", Redact(spec.URL), redactErr(err, spec.URL))
	}
	pctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, nil, &UnreachableError{Store: "PostgreSQL", URL: Redact(spec.URL), Err: redactErr(err, spec.URL)}
	}
	ps, err := pgstore.New(pctx, pool, pgstore.WithTable(spec.PostgresTable), pgstore.WithCreateSchema(spec.PostgresCreateSchema),
		pgstore.WithSweep(spec.PostgresSweepInterval, pgstore.DefaultSweepBatch))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return ps, func() error { err := ps.Close(); pool.Close(); return err }, nil
}

// Opened is an open store.
type Opened struct {
	Store  cache.Store
	Memory *memstore.Store // the memory store, for its gauges; nil for others
	close  func() error
}

// Close closes the store and what it holds. It is idempotent.
func (o *Opened) Close() error {
	c := o.close
	o.close = nil
	if c == nil {
		return nil
	}
	return c()
}

// Open opens the store spec selects. A store that does not answer at once is an
// error (the proxy refuses to start against an unreachable Redis).
func Open(ctx context.Context, spec Spec) (*Opened, error) {
	if err := Check(spec); err != nil {
		return nil, err
	}
	kind, _ := KindOf(spec.URL)
	switch kind {
	case "memory":
		s, err := OpenMemory(spec.MemoryMaxRecords, spec.MemoryMaxBytes)
		if err != nil {
			return nil, err
		}
		return &Opened{Store: s, Memory: s, close: s.Close}, nil
	case "postgres":
		ps, closeFn, err := OpenPostgres(ctx, spec)
		if err != nil {
			return nil, err
		}
		return &Opened{Store: ps, close: closeFn}, nil
	default:
		rs, closeFn, err := OpenRedis(ctx, spec, false)
		if err != nil {
			return nil, err
		}
		return &Opened{Store: rs, close: closeFn}, nil
	}
}

// OpenRedis opens the Redis store spec selects: dials, checks the eviction
// policy, and returns the store with the function that closes it and its client
// (the store first). A Redis that does not answer is an error, unless
// startUnreachable: then a warning, and requests fail (503) until it answers.
func OpenRedis(ctx context.Context, spec Spec, startUnreachable bool) (*redisstore.Store, func() error, error) {
	client, err := DialRedis(ctx, spec.URL)
	var unreachable *UnreachableError
	switch {
	case errors.As(err, &unreachable) && startUnreachable:
		if spec.Warn != nil {
			spec.Warn("idempotency: Redis unreachable at start-up", "url", unreachable.URL, "error", unreachable.Err)
		}
	case err != nil:
		if client != nil {
			client.Close()
		}
		return nil, nil, err
	default:
		if err := EnforceNoEviction(ctx, client, spec.RedisAllowEviction, spec.Warn); err != nil {
			client.Close()
			return nil, nil, err
		}
	}
	if spec.Trace {
		if err := redisotel.InstrumentTracing(client); err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("tracing Redis: %w", err)
		}
	}
	rs, err := redisstore.New(client, redisstore.WithPrefix(spec.RedisPrefix),
		redisstore.WithWaitReplicas(int(spec.RedisWaitReplicas), spec.RedisWaitTimeout))
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return rs, func() error { return errors.Join(rs.Close(), client.Close()) }, nil
}

// OpenMemory opens a memory store with the given bounds.
func OpenMemory(maxRecords, maxBytes int64) (*memstore.Store, error) {
	return memstore.New(memstore.WithMaxRecords(maxRecords), memstore.WithMaxBytes(maxBytes))
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

// UnreachableError: the store did not answer at start-up.
type UnreachableError struct {
	Store string // "Redis", "PostgreSQL"
	URL   string // redacted
	Err   error
}

func (e *UnreachableError) Error() string {
	// One line: pgx lists every address it tried on lines of their own.
	return fmt.Sprintf("%s: %s unreachable: %s", e.URL, e.Store, strings.Join(strings.Fields(e.Err.Error()), " "))
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// Redact hides the password in a store URL, for logs.
func Redact(rawURL string) string {
	if _, err := url.Parse(rawURL); err != nil || !strings.Contains(rawURL, "://") {
		return rawURL
	}
	return redisstore.Redact(rawURL)
}

// EnforceNoEviction applies CheckEviction's answer: an evicting policy is an error
// unless allowed (then a warning); an unanswered check is a warning.
func EnforceNoEviction(ctx context.Context, client redis.UniversalClient, allow bool, warn func(string, ...any)) error {
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

// EvictionError: Redis runs with a maxmemory-policy that may evict idemproxy's
// keys, in-flight locks included, so a duplicate could run while the first runs.
type EvictionError struct {
	Policy string
}

func (e *EvictionError) Error() string {
	return fmt.Sprintf("Redis maxmemory-policy is %s: at its memory limit Redis may evict in-flight locks, and a duplicate would run while the first still runs; set it to noeviction (CONFIG SET maxmemory-policy noeviction), or allow eviction explicitly", e.Policy)
}

// CheckEviction reads Redis's maxmemory-policy on every primary the client
// reaches. It answers an *EvictionError for any policy but noeviction (every key
// the store writes has a TTL, so volatile-* policies evict them too), and a
// plain error when the server does not say (CONFIG refused, as on managed
// Redis): the caller logs that and goes on.
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
