package caddymodule

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// pool keeps stores alive across config reloads. Caddy provisions the new config
// before it cleans up the old one, so a store both use is never let go; and a
// store no config uses any more is closed only once the last request using it
// (and its background completion) is done, for a reload does not wait for the
// old config's requests.
var pool = caddy.NewUsagePool()

// pooled counts the users of one shared store. With the store (pooledStore)
// it implements cache.Pinned (the core pins it for every request) and
// caddy.Destructor, which closes the store only when no pin is out.
type pooled struct {
	close func() error

	// checked: the store answered and passed its checks when it was opened
	// (opened for a handler without start_unreachable), or since (check).
	checked  atomic.Bool
	checking sync.Mutex // one check at a time

	mu       sync.Mutex
	pins     int
	released bool // no config uses it: close at the last release
	closed   bool
}

// Pin implements cache.Pinned.
func (p *pooled) Pin() func() {
	p.mu.Lock()
	p.pins++
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(p.release) }
}

// check makes sure, for a handler without start_unreachable, that the
// store answers and passes the checks of its opening: a store opened for a
// handler with start_unreachable (in this config or a running one) may have
// skipped them, and is checked by open, a strict opening of the same store,
// once it succeeds. Which handler opened the store first then does not
// matter.
func (p *pooled) check(open func() error) error {
	if p.checked.Load() {
		return nil
	}
	p.checking.Lock()
	defer p.checking.Unlock()
	if p.checked.Load() {
		return nil
	}
	if err := open(); err != nil {
		return err
	}
	p.checked.Store(true)
	return nil
}

// pinOpen pins the store unless it is closed (no config uses it and no pin
// was out): the admin API pins the store of the handler it picked for the
// time of its operation.
func (p *pooled) pinOpen() (unpin func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false
	}
	p.pins++
	var once sync.Once
	return func() { once.Do(p.release) }, true
}

func (p *pooled) release() {
	p.mu.Lock()
	p.pins--
	closeNow := p.released && p.pins == 0 && !p.closed
	p.closed = p.closed || closeNow
	p.mu.Unlock()
	if closeNow {
		_ = p.close()
	}
}

// Destruct implements caddy.Destructor: the last config using the store is gone.
// It closes the store now, or at the release of the last pin.
func (p *pooled) Destruct() error {
	p.mu.Lock()
	p.released = true
	closeNow := p.pins == 0 && !p.closed
	p.closed = p.closed || closeNow
	p.mu.Unlock()
	if closeNow {
		return p.close()
	}
	return nil
}

// pooledStore is a store shared through pool. The core pins it (cache.Pinned)
// and uses the store it wraps (cache.Wrapper), whose optional interfaces
// (cache.Notifier, cache.InProcess, cache.RequestBounded) are the ones that
// count.
type pooledStore struct {
	cache.Store
	*pooled
}

// Unwrap implements cache.Wrapper.
func (p *pooledStore) Unwrap() cache.Store { return p.Store }

// registerStore registers the store module of the store k:
// http.handlers.idempotency.stores.<name>.
func registerStore(k stores.Entry) { caddy.RegisterModule(newStore(k)) }

// Store is a store guest module, http.handlers.idempotency.stores.<name>: one
// is registered for each store of the registry (internal/stores.Drivers), and
// reads that store's description (cache.Driver). Its JSON is where the store is,
// under the store's locator: "url" (a redis://, postgres://… URL), or
// DynamoDB's "table" (region, credentials and endpoint from the Caddy
// process's AWS environment); placeholders such as {env.REDIS_URL} are
// replaced. Then the store's settings, by name, each over its default. The
// memory store has no locator: there is one per process, shared by every site
// and handler and kept across reloads, and a reload that changes its settings
// applies them to it, its records and in-flight claims kept. Every other store
// is shared by the configs that agree on its identity (its locator and
// settings, internal/stores.Key), kept across reloads.
type Store struct {
	kind stores.Entry
	// Location is where the store is: the URL, or the table; empty for the
	// memory store.
	Location string
	// Settings are the store's (memstore.Settings, redisstore.Settings, …).
	Settings cache.Settings

	key   string
	store *pooledStore
}

// newStore is a module of the store k, holding its defaults.
func newStore(k stores.Entry) *Store { return &Store{kind: k, Settings: k.Settings()} }

// CaddyModule returns the Caddy module information.
func (s *Store) CaddyModule() caddy.ModuleInfo {
	k := s.kind
	return caddy.ModuleInfo{
		ID:  caddy.ModuleID("http.handlers.idempotency.stores." + k.Name),
		New: func() caddy.Module { return newStore(k) },
	}
}

// UnmarshalJSON reads the module's locator and settings over their defaults.
func (s *Store) UnmarshalJSON(b []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	loc := s.kind.Locator
	if raw, ok := obj[loc]; ok && loc != "" {
		if err := json.Unmarshal(raw, &s.Location); err != nil {
			return fmt.Errorf("%s store: %s: %w", s.kind.Name, loc, err)
		}
	}
	err := conf.DecodeJSON(stores.Fields(s.Settings), s.Settings, obj, func(name string) bool {
		return name == "type" || name == loc && loc != ""
	})
	if err != nil {
		return fmt.Errorf("%s store: %w", s.kind.Name, err)
	}
	return nil
}

// MarshalJSON writes the locator and the settings that differ from their
// defaults.
func (s Store) MarshalJSON() ([]byte, error) {
	def := s.kind.Settings()
	obj := conf.EncodeJSON(stores.Fields(s.Settings), s.Settings, func(f conf.Field) bool { return !f.Equal(s.Settings, def) })
	if s.kind.Locator != "" && s.Location != "" {
		obj[s.kind.Locator] = s.Location
	}
	return json.Marshal(obj)
}

// url is the store's URL, placeholders replaced: the location itself, or
// after the scheme (dynamodb://TABLE); the store's name for a store without
// a location.
func (s *Store) url() string {
	loc := caddy.NewReplacer().ReplaceAll(s.Location, "")
	switch s.kind.Locator {
	case "":
		return s.kind.Name
	case "url":
		return loc
	}
	return s.kind.Schemes[0] + "://" + loc
}

// describe is the store as the admin API lists it: its kind, its URL
// (redacted), and the settings of its identity (internal/stores.Key) that
// differ from their defaults (prefix=b:), which tell two stores on one
// server apart.
func (s *Store) describe() string {
	parts := []string{s.kind.Name}
	if s.kind.Locator != "" {
		parts = append(parts, cache.RedactURL(s.url()))
	}
	def := s.kind.Settings()
	for _, f := range stores.Fields(s.Settings) {
		if f.Reload == "" && !f.Equal(s.Settings, def) {
			parts = append(parts, f.Name+"="+f.Text(s.Settings))
		}
	}
	return strings.Join(parts, " ")
}

// Provision opens the store, or reuses the one a config with the same
// identity opened (one per URL and settings; the memory store, one per
// process), and applies this config's live settings to it.
func (s *Store) Provision(ctx caddy.Context) error {
	if err := s.Validate(); err != nil {
		return err
	}
	url := s.url()
	s.key = stores.Key(s.kind, s.Settings, url)
	start, _ := ctx.Value(startUnreachableKey{}).(bool)
	v, _, err := pool.LoadOrNew(s.key, func() (caddy.Destructor, error) {
		o, err := stores.Open(ctx, s.kind, s.Settings, url, stores.Env{Warn: ctx.Slogger().Warn, Info: ctx.Slogger().Info, StartUnreachable: start})
		if err != nil {
			return nil, err
		}
		p := &pooled{close: o.Close}
		p.checked.Store(!start || s.kind.Locator == "") // a store in the process always answers
		return &pooledStore{Store: o.Store, pooled: p}, nil
	})
	if err != nil {
		s.key = "" // nothing of the pool's to let go (Cleanup)
		return fmt.Errorf("%s store: %w", s.kind.Name, err)
	}
	s.store = v.(*pooledStore)
	if !start {
		err := s.store.check(func() error {
			o, err := stores.Open(ctx, s.kind, s.Settings, url, stores.Env{Warn: ctx.Slogger().Warn})
			if err != nil {
				return err
			}
			return o.Close()
		})
		if err != nil {
			return fmt.Errorf("%s store: %w", s.kind.Name, err) // Cleanup lets the store go
		}
	}
	changed, err := stores.ApplyLive(s.Settings, s.store.Store)
	if err != nil {
		return fmt.Errorf("%s store: %w", s.kind.Name, err) // Cleanup lets the store go
	}
	if len(changed) > 0 {
		args := []any{"store", s.kind.Name, "settings", strings.Join(changed, ", ")}
		for _, name := range changed {
			if f, ok := conf.Lookup(stores.Fields(s.Settings), name); ok {
				args = append(args, name, f.Text(s.Settings))
			}
		}
		ctx.Slogger().Info("idempotency: store settings changed; applied to the live store, its records and in-flight claims kept", args...)
	}
	return nil
}

// Validate implements caddy.Validator.
func (s *Store) Validate() error {
	if s.kind.Locator != "" && s.Location == "" {
		return fmt.Errorf("%s store: %s is required", s.kind.Name, s.kind.Locator)
	}
	return s.Settings.Validate(s.url())
}

// Cleanup releases this config's use of the store; it closes when no config and
// no request uses it.
func (s *Store) Cleanup() error {
	if s.key == "" {
		return nil
	}
	_, err := pool.Delete(s.key)
	s.key = ""
	return err
}

// startUnreachableKey is the context key of the handler's start_unreachable,
// in the context its store module is provisioned with.
type startUnreachableKey struct{}

// IdempotencyStore implements StoreModule.
func (s *Store) IdempotencyStore() cache.Store { return s.store }

// Interface guards.
var (
	_ caddy.Provisioner  = (*Store)(nil)
	_ caddy.Validator    = (*Store)(nil)
	_ caddy.CleanerUpper = (*Store)(nil)
	_ StoreModule        = (*Store)(nil)
	_ cache.Pinned       = (*pooledStore)(nil)
	_ cache.Wrapper      = (*pooledStore)(nil)
)
