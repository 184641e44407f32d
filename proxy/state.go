package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httputil"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
)

// state is one configuration's routes, upstream and store: what a request is
// served with. A reload builds a new state and swaps it in; a request keeps
// the state it started with (acquire) to its end, and the old state's store
// is released once the last such request and its background stores are done.
type state struct {
	cfg   *Config
	store *sharedStore
	cache cache.Store
	fwd   *forwarding
	cert  *tls.Certificate // nil without TLS
	rp    *httputil.ReverseProxy
	// transport to the upstream: kept by a reload that leaves upstream_timeout
	// alone, with its idle connections.
	transport http.RoundTripper
	next      middleware.Next
	def       *route
	routes    []*route        // longest path first
	tracked   map[string]bool // methods tracked by some route, canonical: their paths must be canonical
	users     atomic.Int64    // requests being served with this state
	rc        *reconciler     // nil: no route reconciles (reconcile.go)
}

// sharedStore is an open store and the states that use it: a reload that
// keeps the store's identity (stores.Opened.Serves: the memory store always)
// keeps it with its records and in-flight claims, and it is closed when the
// last state using it is done.
type sharedStore struct {
	opened *stores.Opened
	refs   atomic.Int32
}

func (s *sharedStore) release() {
	if s.refs.Add(-1) == 0 {
		_ = s.opened.Close()
	}
}

// newState builds the state of cfg. It shares prev's store when it serves cfg
// (stores.Opened.Serves: the same identity), with cfg's live store settings
// applied to it (the memory store's bounds), and opens a new one otherwise
// (reopened).
func (p *Proxy) newState(ctx context.Context, cfg *Config, prev *state) (st *state, reopened bool, err error) {
	if st, err = p.prepareState(cfg); err != nil {
		return nil, false, err
	}
	env := stores.Env{Warn: p.log.Warn, Info: p.log.Info, Trace: cfg.tracing, StoreTimeout: cfg.StoreTimeout}
	if prev != nil && prev.store.opened.Serves(cfg.Stores.Key(cfg.Store), env) {
		prev.store.refs.Add(1)
		st.store = prev.store
	} else {
		opened, err := cfg.Stores.Open(ctx, cfg.Store, env)
		if err != nil {
			return nil, false, cfg.storeError(err)
		}
		st.store, reopened = &sharedStore{opened: opened}, true
		st.store.refs.Store(1)
	}
	st.cache = st.store.opened.Store
	if prev != nil && sameTransport(prev.cfg.Upstream, prev.cfg.UpstreamTimeout, cfg.Upstream, cfg.UpstreamTimeout) {
		st.transport = prev.transport
	} else {
		st.transport = upstreamTransport(cfg)
	}
	if err := p.buildRoutes(st); err != nil {
		st.store.release()
		return nil, false, err
	}
	if !reopened { // last: nothing below fails, so a reload that fails changes nothing
		applied, err := cfg.Stores.Apply(st.store.opened)
		if err != nil {
			st.store.release()
			return nil, false, cfg.storeError(err)
		}
		if len(applied) > 0 {
			p.log.Info("reload: store settings applied to the running store; its records and in-flight claims kept",
				"settings", strings.Join(applied, ", "))
		}
	}
	st.startReconcile()
	return st, reopened, nil
}

// prepareState checks cfg and builds what its state needs before a store:
// the TLS certificate, the forwarding rules. `idemproxy validate` runs it too.
func (p *Proxy) prepareState(cfg *Config) (*state, error) {
	cfg.tracing = p.tracing
	if cfg.stale() { // not validated (ParseArgs validates), or changed since
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	st := &state{cfg: cfg}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", cfg.source("tls_cert"), cfg.source("tls_key"), err)
		}
		st.cert = &cert
	}
	var err error
	if st.fwd, err = newForwarding(cfg); err != nil {
		return nil, err
	}
	return st, nil
}

// buildRoutes builds st's reverse proxy and its routes' handlers.
func (p *Proxy) buildRoutes(st *state) error {
	cfg := st.cfg
	st.rp = p.reverseProxy(st)
	st.next = middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error { return p.attempt(st, w, r) })
	for i, cr := range cfg.compiled {
		rt, err := p.buildRoute(st, cr)
		switch {
		case err != nil && i == 0:
			return cfg.named(err, nil, 0)
		case err != nil:
			return cfg.named(err, &cfg.Routes[i-1], i-1)
		case i == 0:
			st.def = rt
		default:
			st.routes = append(st.routes, rt)
		}
	}
	st.tracked = map[string]bool{}
	for _, rt := range append([]*route{st.def}, st.routes...) {
		for _, m := range rt.methods {
			st.tracked[m] = true // upper case (Validate)
		}
	}
	sort.SliceStable(st.routes, func(i, j int) bool { return len(st.routes[i].match) > len(st.routes[j].match) })
	return nil
}

// acquire returns the current state, counted as in use until release.
func (p *Proxy) acquire() *state {
	for {
		st := p.cur.Load()
		st.users.Add(1)
		if p.cur.Load() == st {
			return st // a reload that swaps it now waits for this request
		}
		st.users.Add(-1) // swapped meanwhile: take the new one
	}
}

func (st *state) release() { st.users.Add(-1) }

// wait waits for responses whose storing is being retried (see
// middleware.Handler.Wait).
func (st *state) wait(ctx context.Context) error {
	for _, rt := range append([]*route{st.def}, st.routes...) {
		if err := rt.h.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// retire lets old finish: its requests, then the responses it is still
// storing (up to its shutdown_timeout), then releases its store.
func (p *Proxy) retire(old *state) {
	p.retiring.Add(1)
	go func() {
		defer p.retiring.Done()
		old.stopReconcile() // the new state's worker takes the due jobs
		for old.users.Load() > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), old.cfg.ShutdownTimeout)
		defer cancel()
		if err := old.wait(ctx); err != nil {
			p.log.Warn("reload: responses of the previous configuration not all stored in time", "error", err)
		}
		old.store.release()
		if t, ok := old.transport.(interface{ CloseIdleConnections() }); ok && old.transport != p.cur.Load().transport {
			t.CloseIdleConnections() // no state uses it any more
		}
	}()
}

// Reload swaps in cfg: routes, upstream, forwarding, certificate and every
// core setting at once, for the next request; requests in flight finish with
// the configuration they started with. The store is kept, with its records and
// in-flight claims, unless its identity changed (stores.Settings.Key: the URL
// or a setting of a shared store; never a memory store setting, which is
// applied to the running store). Settings that need a restart keep their
// running values and are named in the log. On error the running configuration
// stays.
func (p *Proxy) Reload(ctx context.Context, cfg *Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	cfg, needRestart := restartKept(old.cfg, cfg)
	st, reopened, err := p.newState(ctx, cfg, old)
	if err != nil {
		return err
	}
	if reopened {
		p.metrics.memory(st.store.opened.Store)
	}
	p.cur.Store(st)
	p.retire(old)
	store := "kept"
	if reopened {
		store = "reopened"
	}
	if len(needRestart) > 0 {
		p.log.Warn("reload: these settings changed but take effect only at a restart; their running values are kept",
			"settings", strings.Join(needRestart, ", "))
	}
	p.log.Info("configuration reloaded", "file", cfg.file, "routes", len(cfg.Routes), "store", store,
		"upstream", cfg.Upstream, "tls", cfg.TLSCert != "")
	return nil
}

// restartKept returns next with the running values (old's) of the settings
// whose change takes effect only at a restart, by their reload tags:
// "restart" (the listeners, their timeouts and guards, the log's format and
// level) and "restart-on-off" (TLS turned on or off), and the names of those
// next had changed. next itself is left as it is.
func restartKept(old, next *Config) (*Config, []string) {
	kept := *next
	kept.Stores = next.Stores.Clone() // a copy of the struct shares them
	var changed []string
	for _, f := range fields() {
		was, now := f.Text(old), f.Text(next) // text: an empty list is no list
		switch {
		case f.Reload == conf.ReloadRestart && was != now:
			changed = append(changed, f.Name)
		case f.Reload == conf.ReloadRestartOnOff && (was == "") != (now == ""):
			changed = append(changed, f.Name+" (on or off)")
		default:
			continue
		}
		f.Copy(&kept, old)
	}
	return &kept, changed
}

// certificate serves the current state's certificate (tls.Config.GetCertificate).
func (p *Proxy) certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := p.cur.Load().cert; cert != nil {
		return cert, nil
	}
	return nil, fmt.Errorf("no certificate")
}
