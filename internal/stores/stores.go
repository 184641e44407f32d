// Package stores is the registry of stores: Drivers lists every store this
// program knows, each described by its own package (cache.Driver: its name, the
// URL schemes that select it, its settings as one tagged struct, how to check
// them and open it). The proxy's configuration (--store and each store's
// settings, prefixed: redis_prefix), the Caddy store modules, idemproxy
// migrate and a reload's "same store?" all read it. A new store is its
// package and one line in Drivers.
package stores

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
)

// Drivers are the stores, in the order of their settings. A new store is one
// line here.
var Drivers = []Entry{
	{Driver: memstore.Driver},
	{Driver: redisstore.Driver, Trace: traceRedis},
	{Driver: pgstore.Driver, Trace: tracePostgres},
	{Driver: dynamostore.Driver, Trace: traceDynamoDB},
}

// Entry is a store this program knows: its description, and how this
// program traces it.
type Entry struct {
	cache.Driver
	// Trace, when set, makes the store's calls spans of the global
	// OpenTelemetry tracer provider: it is given the client the store gives
	// cache.Env.Instrument (Env.Trace). rawURL is the store's.
	Trace func(rawURL string, client any) error
}

// Lookup returns the store named name.
func Lookup(name string) (Entry, bool) {
	i := slices.IndexFunc(Drivers, func(k Entry) bool { return k.Name == name })
	if i < 0 {
		return Entry{}, false
	}
	return Drivers[i], true
}

// Select returns the store a URL selects: by its scheme, in any case, or by
// the URL alone when it is a scheme ("memory").
func Select(rawURL string) (Entry, error) {
	scheme := rawURL
	if i := strings.Index(rawURL, "://"); i >= 0 {
		scheme = rawURL[:i]
	}
	for _, k := range Drivers {
		for _, s := range k.Schemes {
			if strings.EqualFold(scheme, s) {
				return k, nil
			}
		}
	}
	var all []string
	for _, k := range Drivers {
		for _, s := range k.Schemes {
			if k.Locator == "" {
				all = append(all, s)
			} else {
				all = append(all, s+"://")
			}
		}
	}
	return Entry{}, fmt.Errorf("%q: want %s", Redact(rawURL), strings.Join(all, ", "))
}

// KindOf returns the name of the store a URL selects (Select).
func KindOf(rawURL string) (string, error) {
	k, err := Select(rawURL)
	return k.Name, err
}

// Help says which URLs select a store, every store's in turn: the help of
// idemproxy's --store.
func Help() string {
	var each []string
	for _, k := range Drivers {
		each = append(each, k.Help)
	}
	if n := len(each); n > 1 {
		return strings.Join(each[:n-1], ", ") + ", or " + each[n-1]
	}
	return strings.Join(each, "")
}

// Redact hides the secrets of a store URL (cache.RedactURL), for logs.
func Redact(rawURL string) string { return cache.RedactURL(rawURL) }

// Env is what opening a store may use beyond its settings.
type Env struct {
	// Warn receives what Open tolerates but an operator should know.
	Warn func(msg string, args ...any)
	// Info receives what Open decided that an operator may want to know (the
	// local cache's size, or why there is none).
	Info func(msg string, args ...any)
	// Trace makes the store's calls spans of the global OpenTelemetry tracer
	// provider, through its Entry's Trace: redisotel for Redis, a pgx query
	// tracer for PostgreSQL, a span per request for DynamoDB.
	Trace bool
	// StartUnreachable opens a store that does not answer yet (Caddy: requests
	// fail with 503 until it does) instead of failing, where the store can.
	StartUnreachable bool
	// StoreTimeout is the core's store_timeout: a store that bounds each of
	// its requests itself (DynamoDB, cache.RequestBounded) bounds each by it.
	// 0: the store's default (the core's default store_timeout).
	StoreTimeout time.Duration
}

// env is what the store k at rawURL is given.
func (e Env) env(k Entry, rawURL string) cache.Env {
	ce := cache.Env{Warn: e.Warn, Info: e.Info, StartUnreachable: e.StartUnreachable, StoreTimeout: e.StoreTimeout}
	if e.Trace && k.Trace != nil {
		ce.Instrument = func(client any) error { return k.Trace(rawURL, client) }
	}
	return ce
}

// Opened is an open store.
type Opened struct {
	Store cache.Store
	Kind  Entry
	// key is its identity (Key), storeTimeout its env's (Serves).
	key          string
	storeTimeout time.Duration
	close        func() error
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

// Open opens the store that k's settings s describe at rawURL.
func Open(ctx context.Context, k Entry, s cache.Settings, rawURL string, env Env) (*Opened, error) {
	if err := s.Validate(rawURL); err != nil {
		return nil, err
	}
	store, closeFn, err := s.Open(ctx, rawURL, env.env(k, rawURL))
	if err != nil {
		return nil, err
	}
	return &Opened{Store: store, Kind: k, key: Key(k, s, rawURL), storeTimeout: env.StoreTimeout, close: closeFn}, nil
}
