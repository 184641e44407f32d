package cache

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Driver describes a store to the programs that open one from configuration:
// idemproxy (--store and the store's settings), the Caddy module (a store
// module per kind), `idemproxy migrate` and a configuration reload. Each
// store package has one (memstore.Driver, redisstore.Driver, …), and a program's
// list of them is the only list of stores it knows: a new store is its
// package and one line in that list.
type Driver struct {
	// Name is the store's name in configuration, in lower case: the prefix of
	// its settings in idemproxy (redis_prefix), its Caddy module
	// (http.handlers.idempotency.stores.redis).
	Name string
	// Title names the store in messages: Redis, PostgreSQL.
	Title string
	// Schemes are the URL schemes that select the store, in lower case. A URL
	// that is a scheme alone, without "://", selects it too ("memory").
	Schemes []string
	// Locator names what says where the store is, in its Caddy module's JSON
	// and after its name in a Caddyfile: "url", the URL itself; another name
	// for what follows the scheme's "://" (DynamoDB's "table", of
	// dynamodb://TABLE). Empty: the store is in the process (memory), and one
	// store serves whatever URL selects it.
	Locator string
	// Help says which URLs select the store, for the help of idemproxy's
	// --store (and its row in docs/settings.md): "a postgres://
	// (postgresql://) URL"; 'x' marks x as a literal ("'memory'").
	Help string
	// Settings returns new settings holding their defaults.
	Settings func() Settings
}

// Settings are a store's settings: a pointer to a struct whose settings are
// its fields with a json name and a doc comment (and unit, reload and go tags),
// read by idemproxy's internal/conf: each is a flag, a variable and a file key
// of idemproxy, with the kind's name in front (redis_prefix), refused while
// another store is selected, and a setting of the Caddy store module. The
// doc comment is the setting's one description (go doc, --help,
// docs/settings.md), and ends with the default: "Default: 1m.". A reload
// opens the store again when a setting
// without a reload tag changes; reload:"live" settings are applied to the
// open store (LiveSettings).
type Settings interface {
	// Check checks the settings alone. A setting at fault is a *FieldError.
	Check() error
	// Validate checks the settings and the URL, which it parses: nothing is
	// dialled.
	Validate(rawURL string) error
	// Open opens the store at rawURL with the settings, and returns it with
	// the function that closes it and what Open made for it (a client, a
	// pool). A store that does not answer is an *UnreachableError, unless
	// env.StartUnreachable and the store can start so.
	Open(ctx context.Context, rawURL string, env Env) (Store, func() error, error)
}

// LiveSettings are settings that a reload gives the open store instead of
// opening it again (the memory store's bounds: its records stay).
type LiveSettings interface {
	Settings
	// Apply gives the settings tagged reload:"live" to store, which Open of
	// the same kind opened, and returns the names of those that changed.
	Apply(store Store) (changed []string, err error)
}

// SchemaSettings are the settings of a store whose schema an operator may
// apply apart from start-up (`idemproxy migrate`): a table, its index.
// idemproxy migrate takes as flags the settings tagged `schema:""`, which
// Schema reads.
type SchemaSettings interface {
	Settings
	// Schema returns what Migrate applies to the store at rawURL, to read
	// or apply by hand (SQL, AWS CLI commands). rawURL may be "" when the
	// settings alone name the schema.
	Schema(rawURL string) (string, error)
	// Migrate applies the schema to the store at rawURL, and names what is
	// ready ("table idem"). Applying it again changes nothing.
	Migrate(ctx context.Context, rawURL string, env Env) (ready string, err error)
}

// Env is what opening a store from configuration may use beyond its
// settings.
type Env struct {
	// Warn receives what Open tolerates but an operator should know.
	// Optional.
	Warn func(msg string, args ...any)
	// Info receives what Open decided that an operator may want to know
	// (a default it picked). Optional.
	Info func(msg string, args ...any)
	// Instrument, when set, is given the client Open builds, before its
	// first use, to trace its calls; each store says what it gives (a
	// redis.UniversalClient, a *pgx.ConnConfig, …). An error fails Open.
	Instrument func(client any) error
	// StartUnreachable opens a store that does not answer yet (requests
	// fail until it does) instead of failing, where the store can.
	StartUnreachable bool
	// StoreTimeout is the core's store_timeout: a store that bounds each of
	// its requests itself (RequestBounded) bounds each by it. 0: the store's
	// default.
	StoreTimeout time.Duration
}

// Warning passes msg to e.Warn, when set.
func (e Env) Warning(msg string, args ...any) {
	if e.Warn != nil {
		e.Warn(msg, args...)
	}
}

// Note passes msg to e.Info, when set.
func (e Env) Note(msg string, args ...any) {
	if e.Info != nil {
		e.Info(msg, args...)
	}
}

// PingTimeout bounds the check, when a store is opened from configuration,
// that it answers.
const PingTimeout = 5 * time.Second

// FieldError is a setting at fault, named as configuration names it: Field
// is its json name (lock_ttl, wait_timeout), Store the kind's name (redis)
// for a store's own setting and "" for the others (the core's and its
// plug-ins'). It is the one error type of a bad setting, so each surface can
// name the flag, variable, file key or directive at fault in its own terms.
type FieldError struct {
	Store, Field string
	Err          error
}

func (e *FieldError) Error() string {
	if e.Store == "" {
		return e.Field + ": " + e.Err.Error()
	}
	return e.Store + " store: " + e.Field + ": " + e.Err.Error()
}
func (e *FieldError) Unwrap() error { return e.Err }

// FieldErrorf returns a *FieldError.
func FieldErrorf(store, field, format string, args ...any) error {
	return &FieldError{Store: store, Field: field, Err: fmt.Errorf(format, args...)}
}

// UnreachableError: the store did not answer when it was opened.
type UnreachableError struct {
	Store string // its Driver's Title: Redis, PostgreSQL
	URL   string // redacted
	Err   error
}

func (e *UnreachableError) Error() string {
	// One line: pgx lists every address it tried on lines of their own.
	return fmt.Sprintf("%s: %s unreachable: %s", e.URL, e.Store, strings.Join(strings.Fields(e.Err.Error()), " "))
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// Wrapper is implemented by a store that wraps another only to add to it
// (Caddy's handle on a store shared through a pool adds Pinned). The
// middleware pins the wrapper (Pinned) and uses the store it wraps, whose
// optional interfaces (Notifier, InProcess, RequestBounded) are the ones
// that count.
type Wrapper interface {
	Store
	Unwrap() Store
}

// Unwrap returns the store s wraps (Wrapper), or s, and the Pinned s is, if
// any.
func Unwrap(s Store) (Store, Pinned) {
	p, _ := s.(Pinned)
	if w, ok := s.(Wrapper); ok {
		return w.Unwrap(), p
	}
	return s, p
}
