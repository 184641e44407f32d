package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/adminkeys"
)

// newTestProxy builds a proxy on the memory store from a config file's text.
func newTestProxy(t *testing.T, text string) *Proxy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idemproxy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseArgs([]string{"--config", path}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// The proxy as the admin API serves it (package internal/admin tests the API
// itself): a view is the current state, held until released; its routes are
// the state's, by name and by match, the top level otherwise; its Host the
// listener as bound, else as configured; Access admin_token and admin_hosts;
// a settlement counted in the proxy's metrics.
func TestAdminServerIsTheState(t *testing.T) {
	p := newTestProxy(t, "upstream: http://127.0.0.1:1\nlisten: 127.0.0.1:8181\nadmin_token: tok\nadmin_hosts: [admin.internal]\n"+
		"routes:\n  - path: /charges\n  - path: /charges/refunds\n")
	st := p.cur.Load()
	s := adminServer{p}
	v, err := s.View(nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.users.Load(); n != 1 {
		t.Errorf("a view holds the state: %d users, want 1", n)
	}
	byPath := map[string]*route{"": st.def}
	for _, rt := range st.routes {
		byPath[rt.path] = rt
	}
	for _, tc := range []struct {
		got  string
		core any
		want string
	}{
		{"default", v.Default().Core, ""},
		{"named /charges", v.Named("/charges").Core, "/charges"},
		{"named /charges/refunds", v.Named("/charges/refunds").Core, "/charges/refunds"},
		{"named /none", v.Named("/none").Core, ""},
		{"named ''", v.Named("").Core, ""},
		{"match /charges/ch_1", v.Match("/charges/ch_1").Core, "/charges"},
		{"match /charges/refunds/r_1", v.Match("/charges/refunds/r_1").Core, "/charges/refunds"},
		{"match /chargesx", v.Match("/chargesx").Core, ""},
	} {
		if tc.core != any(byPath[tc.want].h) {
			t.Errorf("%s: not the core of route %q", tc.got, tc.want)
		}
	}
	if rt := v.Named("/charges"); rt.Path != "/charges" || v.Default().Path != "" {
		t.Errorf("route paths: %q, %q", rt.Path, v.Default().Path)
	}
	if v.Store() != st.cache {
		t.Error("the view's store is not the state's")
	}
	if h := v.Host(); h != "127.0.0.1:8181" {
		t.Errorf("Host without a bound listener: %q, want the configured listen", h)
	}
	v.Release()
	if n := st.users.Load(); n != 0 {
		t.Errorf("after Release: %d users, want 0", n)
	}
	p.listenAddr = "127.0.0.1:40123"
	v, _ = s.View(nil)
	if h := v.Host(); h != "127.0.0.1:40123" {
		t.Errorf("Host with a bound listener: %q, want it", h)
	}
	v.Release()
	if a := s.Access(); a.Token != "tok" || strings.Join(a.Hosts, ",") != "admin.internal" {
		t.Errorf("Access %+v", a)
	}
	s.Settled(adminkeys.Released)
	s.Settled(adminkeys.Resolved)
	s.Settled(adminkeys.Resolved)
	s.Settled(adminkeys.NotSettled)
	w := httptest.NewRecorder()
	p.MetricsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	for _, line := range []string{"idemproxy_unknown_released_total 1\n", "idemproxy_unknown_resolved_total 2\n"} {
		if !strings.Contains(w.Body.String(), line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}
