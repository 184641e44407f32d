// Package stores opens an idempotency store from its configuration: one tagged
// struct per store (Memory, Redis, Postgres, DynamoDB) that the proxy's
// configuration (with a prefix: redis_prefix), the Caddy store modules and their
// Caddyfile blocks all use, validated once (Validate) and opened once (Open). A
// store URL selects the kind: "memory", redis://…, postgres://…,
// dynamodb://TABLE. A new store is one package in cache/ plus one struct and one
// Kinds entry here.
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
	"github.com/idemproxy/idemproxy/cache/redisstore"
)

// PingTimeout bounds the reachability check at start-up.
const PingTimeout = 5 * time.Second

// Settings are every store's settings; the URL picks which apply (a setting of
// another store is refused: the needs tags, conf.CheckNeeds).
type Settings struct {
	Memory   Memory   `conf:"prefix=memory_" needs:"store=memory"`
	Redis    Redis    `conf:"prefix=redis_" needs:"store=redis"`
	Postgres Postgres `conf:"prefix=postgres_" needs:"store=postgres"`
	DynamoDB DynamoDB `conf:"prefix=dynamodb_" needs:"store=dynamodb"`
}

// DefaultSettings are every store's defaults.
func DefaultSettings() Settings {
	return Settings{Memory: DefaultMemory(), Redis: DefaultRedis(), Postgres: DefaultPostgres(), DynamoDB: DefaultDynamoDB()}
}

// Env is what opening a store may use beyond its settings.
type Env struct {
	// Warn receives what Open tolerates but an operator should know.
	Warn func(msg string, args ...any)
	// Trace makes the store's calls spans of the global OpenTelemetry tracer
	// provider: redisotel for Redis, a pgx query tracer for PostgreSQL, a
	// span per request for DynamoDB.
	Trace bool
	// StartUnreachable opens a store that does not answer yet (Caddy: requests
	// fail with 503 until it does) instead of failing.
	StartUnreachable bool
	// StoreTimeout is the core's store_timeout: a store that bounds each of
	// its requests itself (DynamoDB, cache.RequestBounded) bounds each by it.
	// 0: the store's default (the core's default store_timeout).
	StoreTimeout time.Duration
}

func (e Env) warn(msg string, args ...any) {
	if e.Warn != nil {
		e.Warn(msg, args...)
	}
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
	{Name: "dynamodb", Schemes: []string{"dynamodb"}},
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
	return "", fmt.Errorf("%q: want %s", Redact(rawURL), strings.Join(all, ", "))
}

// Validate checks the settings the URL selects, without opening anything.
func (s Settings) Validate(rawURL string) error {
	kind, err := KindOf(rawURL)
	if err != nil {
		return err
	}
	switch kind {
	case "memory":
		return s.Memory.Validate()
	case "redis":
		return s.Redis.Validate(rawURL)
	case "dynamodb":
		return s.DynamoDB.Validate(rawURL)
	default:
		return s.Postgres.Validate(rawURL)
	}
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

// Open opens the store the URL selects, with its settings. A store that does
// not answer at once is an error (the proxy refuses to start against an
// unreachable Redis), unless env.StartUnreachable.
func (s Settings) Open(ctx context.Context, rawURL string, env Env) (*Opened, error) {
	if err := s.Validate(rawURL); err != nil {
		return nil, err
	}
	kind, _ := KindOf(rawURL)
	switch kind {
	case "memory":
		m, err := s.Memory.Open()
		if err != nil {
			return nil, err
		}
		return &Opened{Store: m, Memory: m, close: m.Close}, nil
	case "postgres":
		ps, closeFn, err := s.Postgres.Open(ctx, rawURL, env)
		if err != nil {
			return nil, err
		}
		return &Opened{Store: ps, close: closeFn}, nil
	case "dynamodb":
		ds, closeFn, err := s.DynamoDB.Open(ctx, rawURL, env)
		if err != nil {
			return nil, err
		}
		return &Opened{Store: ds, close: closeFn}, nil
	default:
		rs, closeFn, err := s.Redis.Open(ctx, rawURL, env)
		if err != nil {
			return nil, err
		}
		return &Opened{Store: rs, close: closeFn}, nil
	}
}

// FieldError is a store setting at fault: Store is the kind (memory, redis,
// postgres, dynamodb), Field the setting's name (wait_timeout).
type FieldError struct {
	Store, Field string
	Err          error
}

func (e *FieldError) Error() string { return e.Store + " store: " + e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(store, field, format string, args ...any) error {
	return &FieldError{Store: store, Field: field, Err: fmt.Errorf(format, args...)}
}

// UnreachableError: the store did not answer at start-up.
type UnreachableError struct {
	Store string // "Redis", "PostgreSQL", "DynamoDB"
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
