package caddy_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/prommetrics/metricstest"
)

// Caddy's /metrics (its admin endpoint) inside real Caddy exports the proxy's
// metric names: the Grafana dashboard and the alert rules in examples/ query only
// metrics it exports (but the proxy's own: upstream timing, operator
// settlements), every idemproxy metric it exports is on them, each with the type,
// help, outcomes and buckets of package prommetrics, and promtool accepts the text.
// The counts follow the requests, and survive a config reload.
func TestCaddyMetricsFitTheDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	dir := t.TempDir()
	caddyfile := func(extra string) string {
		return fmt.Sprintf(globalOptions(dir)+":0 {\n\tidempotency\n\t%s\n\trespond /healthz 200\n\trespond /charges* `{\"id\":1}` 201\n}\n",
			extra)
	}
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile("")), 0o644); err != nil {
		t.Fatal(err)
	}
	p := runCaddy(t, bin, dir, path)

	scrape := func() *metricstest.Surface {
		t.Helper()
		code, body := admin(t, dir, "GET", "/metrics", "", "")
		if code != 200 {
			t.Fatalf("GET /metrics on Caddy's admin endpoint: %d %s", code, body)
		}
		return metricstest.Read(t, "Caddy", body)
	}
	s := scrape()
	metricstest.Check(t, s, "../../examples", slices.Concat(prommetrics.ProxyOnly, prommetrics.LocalCacheMetrics)...)
	metricstest.Same(t, s, metricstest.Reference(t))
	metricstest.Lint(t, s)

	p.Post(t, "/charges", "m1", "x")
	p.Post(t, "/charges", "m1", "x")
	p.Post(t, "/charges", "m1", "other")
	if resp, err := http.Get("http://" + p.Addr + "/charges"); err == nil {
		resp.Body.Close()
	}
	want := func(s *metricstest.Surface, when string) {
		t.Helper()
		for _, c := range []struct {
			name   string
			labels []string
			want   string
		}{
			{prommetrics.RequestsTotal, []string{"outcome", "stored"}, "1"},
			{prommetrics.RequestsTotal, []string{"outcome", "replayed"}, "1"},
			{prommetrics.RequestsTotal, []string{"outcome", "mismatch"}, "1"},
			{prommetrics.RequestsTotal, []string{"outcome", "conflict"}, "0"},
			{prommetrics.StoreDuration + "_count", nil, "3"},
			{prommetrics.MemoryRecords, nil, "1"},
		} {
			if got := s.Value(c.name, c.labels...); got != c.want {
				t.Errorf("%s: %s%v = %q, want %q\n%s", when, c.name, c.labels, got, c.want, s.Text)
			}
		}
		if got := s.Value(prommetrics.RequestsTotal, "outcome", prommetrics.Untracked); got == "0" || got == "" {
			t.Errorf("%s: GETs through the handler counted as untracked: %q", when, got)
		}
	}
	want(scrape(), "after the requests")

	// A reload: a new config with a new metrics registry, which the admin
	// endpoint now serves. The counts are the process's, not the config's.
	if err := os.WriteFile(path, []byte(caddyfile("header X-Reloaded yes")), 0o644); err != nil {
		t.Fatal(err)
	}
	reload(t, p, bin, dir, path)
	if resp, err := http.Get("http://" + p.Addr + "/healthz"); err != nil || resp.Header.Get("X-Reloaded") != "yes" {
		t.Fatalf("the reload did not take effect: %v", err)
	}
	s = scrape()
	want(s, "after a reload")
	metricstest.Check(t, s, "../../examples", slices.Concat(prommetrics.ProxyOnly, prommetrics.LocalCacheMetrics)...)
}
