package proxy

import (
	"context"
	"crypto/subtle"
	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/internal/console"
	"net/http"
	"net/http/pprof"
	"time"
)

// AdminHandler serves the admin API:
//
//	GET    /healthz        the process is up
//	GET    /readyz         the store answers
//	GET    /metrics        Prometheus metrics (prommetrics)
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
// For /keys, the scope is given as the client gave it: ?host=… (default: the
// --listen address, which is what clients calling it by that address send), and
// each scope header either as the same header on the admin request or as a query
// parameter of that name (?authorization=Bearer%20…).
// ?path=/route picks the route whose settings apply (default: the top level).
//
// With admin_token set, every endpoint but /healthz requires
// "Authorization: Bearer <token>" (401 otherwise), and the Authorization header of
// an admin request is that token, never a scope header.
//
// With or without a token, what a web page can make a browser send is refused
// (see refuseBrowsers).
func (p *Proxy) AdminHandler() http.Handler {
	return p.refuseBrowsers(console.Serve("/ui/", p.adminHandler()))
}

func (p *Proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", p.readyz(true))
	mux.Handle("GET /metrics", p.metrics.handler)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /keys/{key...}", p.adminKey)
	mux.HandleFunc("DELETE /keys/{key...}", p.adminKey)
	mux.HandleFunc("POST /release/{key...}", p.adminSettle)
	mux.HandleFunc("POST /resolve/{key...}", p.adminSettle)
	mux.HandleFunc("GET /keys", p.adminByHash)
	mux.HandleFunc("DELETE /keys", p.adminByHash)
	mux.HandleFunc("POST /release", p.adminByHash)
	mux.HandleFunc("POST /resolve", p.adminByHash)
	token := p.cur.Load().cfg.AdminToken // needs a restart to change
	if token == "" {
		return mux
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemproxy admin"`)
			writeJSON(w, http.StatusUnauthorized, adminError{Error: "admin token required (Authorization: Bearer …)"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// readyz answers whether the store answers: 200 ready, or 503, at once while
// the store is known down (middleware.Handler.StoreDown). The store's
// error (which may name its host) is shown with detail only; the listener
// without a token says only that it is unavailable.
func (p *Proxy) readyz(detail bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		st := p.acquire()
		defer st.release()
		err := st.def.h.StoreDown() // known down (the routes share its breaker): no ping to wait for
		if err == nil {
			err = st.cache.Ping(ctx)
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

// MetricsHandler serves /metrics, /healthz and /readyz alone, without a
// token: for Prometheus and for probes on a listener of their own. A request with an Origin header (a web
// page) is refused; any Host is served, since Prometheus often scrapes by a
// DNS name and these read-only counts are no secret a rebound page could use.
func (p *Proxy) MetricsHandler() http.Handler {
	next := p.metricsHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header["Origin"]) > 0 {
			writeJSON(w, http.StatusForbidden, adminError{Error: "a request with an Origin header is refused: the metrics listener does not serve browsers"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (p *Proxy) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", p.readyz(false))
	mux.Handle("GET /metrics", p.metrics.handler)
	return mux
}

type adminError = adminkeys.Error

func writeJSON(w http.ResponseWriter, status int, v any) { adminkeys.WriteJSON(w, status, v) }
