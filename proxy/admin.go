package proxy

// The proxy as its admin API (package internal/admin) serves it: the
// current state, acquired for each admin request.

import (
	"log/slog"
	"net/http"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/admin"
	"github.com/idemproxy/idemproxy/internal/adminkeys"
)

// The admin API's JSON shapes (package adminkeys, shared with Caddy's admin
// API).
type (
	KeyRecord      = adminkeys.KeyRecord
	KeyReconcile   = adminkeys.KeyReconcile
	KeyResponse    = adminkeys.KeyResponse
	ResolveRequest = adminkeys.ResolveRequest
	HeldKey        = adminkeys.HeldKey
	HeldPage       = adminkeys.HeldPage
)

// AdminHandler serves the admin API (package internal/admin: admin.Handler
// lists its endpoints): health, readiness, metrics, pprof, and the keys
// (read, purge, release, resolve; by key in a client's scope or by the
// key_hash the logs print; the held list), with admin_token and admin_hosts
// as they were at start-up.
func (p *Proxy) AdminHandler() http.Handler { return admin.Handler(adminServer{p}) }

// MetricsHandler serves /metrics, /healthz and /readyz alone, without a
// token, for the metrics listener (admin.MetricsHandler).
func (p *Proxy) MetricsHandler() http.Handler { return admin.MetricsHandler(adminServer{p}) }

// adminServer is the proxy as admin.Server.
type adminServer struct{ p *Proxy }

// View acquires the current state; every admin request has one.
func (a adminServer) View(*http.Request) (admin.View, error) {
	return adminView{st: a.p.acquire(), listenAddr: a.p.listenAddr}, nil
}

// Access is admin_token and admin_hosts, which need a restart to change.
func (a adminServer) Access() admin.Access {
	cfg := a.p.cur.Load().cfg
	return admin.Access{Token: cfg.AdminToken, Hosts: cfg.AdminHosts}
}

func (a adminServer) Logger() *slog.Logger  { return a.p.log }
func (a adminServer) Metrics() http.Handler { return a.p.metrics.handler }

func (a adminServer) Settled(s adminkeys.Settlement) {
	switch s {
	case adminkeys.Released:
		a.p.metrics.settled.Released()
	case adminkeys.Resolved:
		a.p.metrics.settled.Resolved()
	}
}

// adminView is one state as admin.View, acquired until Release.
type adminView struct {
	st         *state
	listenAddr string // Proxy.listenAddr
}

func (v adminView) Store() cache.Store             { return v.st.cache }
func (v adminView) Default() admin.Route           { return v.st.def.admin() }
func (v adminView) Match(route string) admin.Route { return v.st.match(route).admin() }
func (v adminView) Release()                       { v.st.release() }

// Named is the route configured with path, else the top level.
func (v adminView) Named(path string) admin.Route {
	for _, rt := range v.st.routes {
		if rt.path == path {
			return rt.admin()
		}
	}
	return v.Default()
}

// Host is the clients' listener as bound (a port of 0 is the one chosen),
// else as configured.
func (v adminView) Host() string {
	if v.listenAddr != "" {
		return v.listenAddr
	}
	return v.st.cfg.Listen
}

// admin is rt as the admin API applies it.
func (rt *route) admin() admin.Route { return admin.Route{Path: rt.path, Core: rt.h} }
