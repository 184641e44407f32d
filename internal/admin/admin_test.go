package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/admin"
	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/middleware"
)

// testServer is an admin.Server over one memory store: the top level and a
// route for each path given, each with its unknown_hold.
type testServer struct {
	store   *memstore.Store
	def     admin.Route
	routes  []admin.Route
	access  admin.Access
	viewErr error        // what View answers, when set
	inUse   atomic.Int64 // views not released
	mu      sync.Mutex
	settled []adminkeys.Settlement
}

// newTestServer builds a testServer: the top level's unknown_hold, then
// path, hold pairs.
func newTestServer(t *testing.T, hold time.Duration, routes ...any) *testServer {
	t.Helper()
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	core := func(hold time.Duration) *middleware.Handler {
		s := middleware.DefaultSettings()
		s.UnknownHold = hold
		h, err := middleware.New(store, middleware.From(s))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	ts := &testServer{store: store, def: admin.Route{Core: core(hold)}}
	for i := 0; i < len(routes); i += 2 {
		ts.routes = append(ts.routes, admin.Route{Path: routes[i].(string), Core: core(routes[i+1].(time.Duration))})
	}
	return ts
}

func (ts *testServer) View(*http.Request) (admin.View, error) {
	if ts.viewErr != nil {
		return nil, ts.viewErr
	}
	ts.inUse.Add(1)
	return testView{ts}, nil
}

func (ts *testServer) Access() admin.Access  { return ts.access }
func (ts *testServer) Logger() *slog.Logger  { return slog.New(slog.DiscardHandler) }
func (ts *testServer) Metrics() http.Handler { return http.NotFoundHandler() }

func (ts *testServer) Settled(s adminkeys.Settlement) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.settled = append(ts.settled, s)
}

type testView struct{ ts *testServer }

func (v testView) Store() cache.Store   { return v.ts.store }
func (v testView) Default() admin.Route { return v.ts.def }
func (v testView) Named(p string) admin.Route {
	for _, rt := range v.ts.routes {
		if rt.Path == p {
			return rt
		}
	}
	return v.ts.def
}
func (v testView) Match(route string) admin.Route {
	for _, rt := range v.ts.routes {
		if route == rt.Path || strings.HasPrefix(route, rt.Path+"/") {
			return rt
		}
	}
	return v.ts.def
}
func (v testView) Host() string { return "api.example" }
func (v testView) Release()     { v.ts.inUse.Add(-1) }

// hold stores key as a held unknown outcome.
func hold(t *testing.T, s cache.Store, key string, hold time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "t-" + key, Fingerprint: "fp", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("claiming %s: %v %v", key, loaded, err)
	}
	if err := s.Complete(ctx, key, "t-"+key, &cache.Record{Fingerprint: "fp", Response: &cache.Response{Status: 504, Unknown: true}}, hold); err != nil {
		t.Fatal(err)
	}
}

// send serves one admin request, by 127.0.0.1 unless target names a host,
// and decodes its JSON answer into out (when not nil).
func send(t *testing.T, h http.Handler, method, target string, header http.Header, body string, out any) int {
	t.Helper()
	if strings.HasPrefix(target, "/") {
		target = "http://127.0.0.1" + target
	}
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for name, vals := range header {
		r.Header[name] = vals
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if out != nil {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, target, w.Code, w.Body, err)
		}
	}
	return w.Code
}

func adminGet(t *testing.T, h http.Handler, target string, out any) int {
	t.Helper()
	return send(t, h, http.MethodGet, target, nil, "", out)
}

var jsonType = http.Header{"Content-Type": {"application/json"}}

// A release and a resolve are counted through Server.Settled, once each, and
// a 409 (not an unknown outcome) is not; every view an admin request takes is
// released.
func TestSettledCountedAndViewsReleased(t *testing.T) {
	ts := newTestServer(t, time.Hour)
	h := admin.Handler(ts)
	a, b := "1a2b3c4d5e6f"+strings.Repeat("0", 52), "6f5e4d3c2b1a"+strings.Repeat("0", 52)
	hold(t, ts.store, a, time.Hour)
	hold(t, ts.store, b, time.Hour)
	if code := send(t, h, "POST", "/release?hash="+a[:12], jsonType, "", nil); code != 200 {
		t.Fatalf("release: %d", code)
	}
	if code := send(t, h, "POST", "/resolve?hash="+b, jsonType, `{"status":201,"body":"done"}`, nil); code != 200 {
		t.Fatalf("resolve: %d", code)
	}
	if code := send(t, h, "POST", "/release?hash="+b, jsonType, "", nil); code != http.StatusConflict {
		t.Fatalf("release of a resolved key: %d, want 409", code)
	}
	if code := send(t, h, "POST", "/release/k", jsonType, "", nil); code != http.StatusNotFound {
		t.Fatalf("release of a key never stored: %d, want 404", code)
	}
	for _, target := range []string{"/keys/k", "/keys?state=held", "/keys?hash=" + a, "/readyz"} {
		adminGet(t, h, target, nil)
	}
	ts.mu.Lock()
	got := ts.settled
	ts.mu.Unlock()
	if len(got) != 2 || got[0] != adminkeys.Released || got[1] != adminkeys.Resolved {
		t.Errorf("settled %v, want released then resolved", got)
	}
	if n := ts.inUse.Load(); n != 0 {
		t.Errorf("%d views not released", n)
	}
}

// A lookup by key builds the client's request: its Host is View.Host without
// ?host=, its scope headers those given; with a token, the Authorization
// header is the admin's token and no scope header; ?path= picks the route
// View.Match names.
func TestKeyLookupScope(t *testing.T) {
	ts := newTestServer(t, time.Hour, "/charges", time.Hour)
	ts.access.Token = "s3cret"
	h := admin.Handler(ts)
	auth := http.Header{"Authorization": {"Bearer s3cret"}, "X-Tenant": {"t1"}}
	var miss struct {
		Scope struct {
			Host    string
			Route   string
			Headers []string `json:"headers_given"`
		}
	}
	if code := send(t, h, "GET", "/keys/k?path=/charges/ch_1", auth, "", &miss); code != http.StatusNotFound {
		t.Fatalf("GET /keys/k: %d", code)
	}
	if miss.Scope.Host != "api.example" || miss.Scope.Route != "/charges" || strings.Join(miss.Scope.Headers, ",") != "X-Tenant" {
		t.Errorf("scope %+v, want host api.example, route /charges, headers X-Tenant", miss.Scope)
	}
	if code := send(t, h, "GET", "/keys/k?host=other.example&authorization=Bearer%20c1", auth, "", &miss); code != http.StatusNotFound ||
		miss.Scope.Host != "other.example" || miss.Scope.Route != "(top level)" || strings.Join(miss.Scope.Headers, ",") != "Authorization,X-Tenant" {
		t.Errorf("?host= and ?authorization=: %d %+v", code, miss.Scope)
	}
	if code := send(t, h, "GET", "/keys/k", nil, "", nil); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code := send(t, h, "GET", "/healthz", nil, "", nil); code != 200 {
		t.Errorf("/healthz without the token: %d, want 200", code)
	}
}

// An error of Server.View is answered: 503 when it is ErrUnavailable, else
// 400; /readyz says the store is unavailable, with the error on the admin
// listener and without it on the metrics listener.
func TestViewErrors(t *testing.T) {
	ts := newTestServer(t, time.Hour)
	h, m := admin.Handler(ts), admin.MetricsHandler(ts)
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("handler %q: %w", "api", admin.ErrUnavailable), http.StatusServiceUnavailable},
		{errors.New("handler: no handler named \"x\""), http.StatusBadRequest},
	} {
		ts.viewErr = tc.err
		for _, target := range []string{"/keys/k", "/keys?hash=1a2b3c4d5e6f", "/keys?state=held"} {
			var e adminkeys.Error
			if code := adminGet(t, h, target, &e); code != tc.want || e.Error != tc.err.Error() {
				t.Errorf("%s with View failing (%v): %d %q, want %d", target, tc.err, code, e.Error, tc.want)
			}
		}
		var ready map[string]string
		if code := adminGet(t, h, "/readyz", &ready); code != http.StatusServiceUnavailable || ready["status"] != "store unavailable" || ready["error"] != tc.err.Error() {
			t.Errorf("/readyz: %d %v", code, ready)
		}
		ready = nil
		if code := adminGet(t, m, "/readyz", &ready); code != http.StatusServiceUnavailable || ready["error"] != "" {
			t.Errorf("metrics /readyz: %d %v, want 503 without the error", code, ready)
		}
	}
}

// The browser guard: a Host that is an IP address (with or without port,
// IPv6 in brackets), localhost, or a name of Access.Hosts in any case, with or
// without a trailing dot, is served; any other Host, an Origin, and a POST
// that is not JSON are refused. The metrics handler serves any Host.
func TestBrowserGuard(t *testing.T) {
	ts := newTestServer(t, time.Hour)
	ts.access.Hosts = []string{"Admin.Internal."}
	h, m := admin.Handler(ts), admin.MetricsHandler(ts)
	for host, want := range map[string]int{
		"127.0.0.1": 200, "10.1.2.3:9090": 200, "[::1]:9090": 200, "[::1]": 200, "localhost:9090": 200, "LOCALHOST": 200,
		"admin.internal": 200, "ADMIN.internal.:9090": 200,
		"evil.example": 403, "admin.internal.evil.example": 403, "internal": 403, "127.0.0.1.evil.example": 403,
	} {
		if code := adminGet(t, h, "http://"+host+"/healthz", nil); code != want {
			t.Errorf("Host %s: %d, want %d", host, code, want)
		}
	}
	if code := adminGet(t, m, "http://evil.example/healthz", nil); code != 200 {
		t.Errorf("metrics listener, Host evil.example: %d, want 200", code)
	}
	// Another site's Origin (the console's own, the listener's scheme and
	// Host, is let through: internal/console's TestBrowserRules).
	origin := http.Header{"Origin": {"http://127.0.0.1:1"}}
	if code := send(t, h, "GET", "http://127.0.0.1/healthz", origin, "", nil); code != http.StatusForbidden {
		t.Errorf("admin, with another site's Origin: %d, want 403", code)
	}
	if code := send(t, h, "GET", "http://127.0.0.1/healthz", http.Header{"Origin": {"http://127.0.0.1"}}, "", nil); code != http.StatusOK {
		t.Errorf("admin, with its own Origin (the console's calls): %d, want 200", code)
	}
	if code := send(t, m, "GET", "http://127.0.0.1/healthz", origin, "", nil); code != http.StatusForbidden {
		t.Errorf("metrics, with an Origin: %d, want 403", code)
	}
	for ct, want := range map[string]int{"text/plain": 415, "": 415, "application/x-www-form-urlencoded": 415, "application/json; charset=utf-8": 404} {
		if code := send(t, h, "POST", "/release/k", http.Header{"Content-Type": {ct}}, "", nil); code != want {
			t.Errorf("POST with Content-Type %q: %d, want %d", ct, code, want)
		}
	}
}
