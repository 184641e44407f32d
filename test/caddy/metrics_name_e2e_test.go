package caddy_test

import (
	"testing"

	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/prommetrics/metricstest"
)

// Two idempotency blocks inside real Caddy, each with its name: Caddy's
// /metrics tells their requests apart by the route label (before, both
// counted under route "").
func TestCaddyMetricsTellHandlersApart(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	dir := t.TempDir()
	p := startCaddy(t, bin, dir, globalOptions(dir)+":0 {\n"+
		"\thandle /charges* {\n\t\tidempotency {\n\t\t\tname charges\n\t\t}\n\t\trespond `{\"id\":1}` 201\n\t}\n"+
		"\thandle /refunds* {\n\t\tidempotency {\n\t\t\tname refunds\n\t\t}\n\t\trespond `{\"id\":2}` 201\n\t}\n}\n")
	p.Post(t, "/charges", "c1", "x")
	p.Post(t, "/charges", "c1", "x")
	p.Post(t, "/refunds", "r1", "x")
	code, body := admin(t, dir, "GET", "/metrics", "", "")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	s := metricstest.Read(t, "Caddy", body)
	for _, c := range []struct{ route, outcome, want string }{
		{"charges", "stored", "1"},
		{"charges", "replayed", "1"},
		{"refunds", "stored", "1"},
		{"refunds", "replayed", "0"},
		{"", "stored", "0"},
	} {
		if got := s.Value(prommetrics.RequestsTotal, "outcome", c.outcome, "route", c.route); got != c.want {
			t.Errorf("%s{outcome=%q,route=%q} = %q, want %q", prommetrics.RequestsTotal, c.outcome, c.route, got, c.want)
		}
	}
}
