// Package admin is idemproxy's admin API: the endpoints, the token, the
// browser guard, a client's key looked up in its scope, keys by hash, the
// held list, release and resolve, and the metrics listener's handler. It
// serves a Server, which gives it a view of the running configuration (the
// store, the routes and their cores) for each admin request; the proxy is
// one (proxy/admin.go). The JSON shapes and the operations on a store are
// package adminkeys, which Caddy's admin API (caddymodule) shares.
package admin

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/internal/console"
	"github.com/idemproxy/idemproxy/middleware"
)

// Server is what the admin API serves: the running configuration, who may
// call the API, and what it reports to.
type Server interface {
	// View is the configuration that serves the admin request r, in use
	// until its Release (a reload meanwhile keeps its store open until
	// then). An error is answered: 503 when it is ErrUnavailable (the
	// configuration r names is gone), else 400 (r names none).
	View(r *http.Request) (View, error)
	// Access is who may call the API. Handler reads it once: a change needs
	// a new handler (for the proxy, a restart).
	Access() Access
	// Logger logs what the API changes: a record purged, a key settled.
	Logger() *slog.Logger
	// Metrics serves GET /metrics.
	Metrics() http.Handler
	// Settled counts a held unknown outcome released or resolved through
	// the API (idemproxy_unknown_released_total, …_resolved_total).
	Settled(adminkeys.Settlement)
}

// View is one running configuration as the admin API reads it: its store
// and its routes, each with the core whose settings apply to its keys.
type View interface {
	// Store is the store of every route of the view.
	Store() cache.Store
	// Default is the route whose settings apply when the admin request
	// names none: the top level.
	Default() Route
	// Match is the route a client's request for path would take, path in
	// route form (middleware.CanonicalPath): Default when none matches.
	Match(route string) Route
	// Named is the route configured with path (as a reconcile job names
	// it), Default when none is.
	Named(path string) Route
	// Host is the Host a lookup by key assumes when the admin request gives
	// none (?host=): what clients calling the listener by its address send.
	Host() string
	// Release ends the admin request's use of the view.
	Release()
}

// Route is a route as the admin API applies it.
type Route struct {
	Path string              // as configured; "" for the top level
	Core *middleware.Handler // its store keys, its unknown_hold, its Resolve
}

// name is the route as the admin API's answers name it.
func (rt Route) name() string {
	if rt.Path == "" {
		return "(top level)"
	}
	return rt.Path
}

// Access is who may call the admin API.
type Access struct {
	// Token, when set, is required of every request but /healthz, as
	// "Authorization: Bearer <token>" (admin_token); the Authorization header
	// of an admin request is then the token, never a client's scope header.
	Token string
	// Hosts are the host names the API may be called by besides IP
	// addresses and localhost (admin_hosts; any case, a trailing dot
	// ignored).
	Hosts []string
}

// ErrUnavailable marks an error of Server.View that is the server's, not the
// admin request's: the configuration it names is gone (a reload closed its
// store). It is answered 503.
var ErrUnavailable = errors.New("unavailable")

// Handler serves the admin API of s:
//
//	GET    /healthz        the process is up
//	GET    /readyz         the store answers
//	GET    /metrics        Prometheus metrics (Server.Metrics)
//	GET    /keys/{key}     the record for key, as JSON
//	DELETE /keys/{key}     purge it (an in-flight key may then run again)
//	POST   /release/{key}  release a key held with an unknown outcome: the next
//	                       retry runs (409 if the record is not an unknown outcome)
//	POST   /resolve/{key}  resolve a key held with an unknown outcome with the
//	                       response its retries get (JSON ResolveRequest body;
//	                       409 if the record is not an unknown outcome)
//	GET    /keys?state=held  the held unknown outcomes and their reconcile
//	                       jobs, a page at a time (?limit=, ?cursor=)
//	GET    /keys?hash=H    the record whose key hash begins with H (12 to 64 hex
//	                       digits: the key_hash the logs print); DELETE /keys,
//	                       POST /release and POST /resolve take ?hash=H too
//	GET    /debug/pprof/   Go profiles (CPU, heap, goroutines, trace)
//	GET    /ui/            the operator console (package console): a page
//	                       served without the token, whose calls send it
//
// Every POST is Content-Type: application/json (415 otherwise).
//
// For /keys, the scope is given as the client gave it: ?host=… (default:
// View.Host, the listener's address, which is what clients calling it by that
// address send), and each scope header either as the same header on the
// admin request or as a query parameter of that name
// (?authorization=Bearer%20…). ?path=/route picks the route whose settings
// apply (default: the top level).
//
// With Access.Token set, every endpoint but /healthz requires
// "Authorization: Bearer <token>" (401 otherwise), and the Authorization
// header of an admin request is that token, never a scope header.
//
// With or without a token, what a web page can make a browser send is
// refused (see refuseBrowsers).
func Handler(s Server) http.Handler {
	acc := s.Access()
	a := &api{s: s, token: acc.Token, log: s.Logger()}
	return refuseBrowsers(acc.Hosts, console.Serve("/ui/", a.handler()))
}

// api is the admin API of one Server.
type api struct {
	s     Server
	token string // Access.Token, as Handler read it
	log   *slog.Logger
}

func (a *api) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", readyz(a.s, true))
	mux.Handle("GET /metrics", a.s.Metrics())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /keys/{key...}", a.byKey((*api).recordOp))
	mux.HandleFunc("DELETE /keys/{key...}", a.byKey((*api).recordOp))
	mux.HandleFunc("POST /release/{key...}", a.byKey((*api).settle))
	mux.HandleFunc("POST /resolve/{key...}", a.byKey((*api).settle))
	mux.HandleFunc("GET /keys", a.byHash)
	mux.HandleFunc("DELETE /keys", a.byHash)
	mux.HandleFunc("POST /release", a.byHash)
	mux.HandleFunc("POST /resolve", a.byHash)
	if a.token == "" {
		return mux
	}
	want := []byte("Bearer " + a.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemproxy admin"`)
			writeJSON(w, http.StatusUnauthorized, adminError{Error: "admin token required (Authorization: Bearer …)"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// view is the view that serves r; on failure it answers and returns nil.
func (a *api) view(w http.ResponseWriter, r *http.Request) View {
	v, err := a.s.View(r)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, ErrUnavailable) {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, adminError{Error: err.Error()})
		return nil
	}
	return v
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers whether the store answers: 200 ready, or 503. The store's
// error (which may name its host) is shown with detail only; the listener
// without a token says only that it is unavailable.
func readyz(s Server, detail bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		v, err := s.View(r)
		if err == nil {
			defer v.Release()
			// Known down (the routes share the store's breaker): no ping to wait for.
			if err = v.Default().Core.StoreDown(); err == nil {
				err = v.Store().Ping(ctx)
			}
		}
		if err != nil {
			out := map[string]string{"status": "store unavailable"}
			if detail {
				out["error"] = err.Error()
			}
			writeJSON(w, http.StatusServiceUnavailable, out)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

// MetricsHandler serves /metrics, /healthz and /readyz of s alone, without a
// token: for Prometheus and for probes on a listener of their own. A request
// with an Origin header (a web page) is refused; any Host is served, since
// Prometheus often scrapes by a DNS name and these read-only counts are no
// secret a rebound page could use.
func MetricsHandler(s Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", readyz(s, false))
	mux.Handle("GET /metrics", s.Metrics())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header["Origin"]) > 0 {
			writeJSON(w, http.StatusForbidden, adminError{Error: "a request with an Origin header is refused: the metrics listener does not serve browsers"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type adminError = adminkeys.Error

func writeJSON(w http.ResponseWriter, status int, v any) { adminkeys.WriteJSON(w, status, v) }
