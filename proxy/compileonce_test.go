package proxy

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// TestEachRouteCompiledOnce: from the command line to a serving proxy, and
// again at a reload, each route's settings are compiled (and its webhook
// secrets read) once; newState, the handlers and a reload use what
// ParseArgs compiled.
func TestEachRouteCompiledOnce(t *testing.T) {
	compiles := map[string]int{} // by webhook preset: "" for the routes without one
	orig := compileConfig
	compileConfig = func(c config.Config) (middleware.Settings, error) {
		compiles[c.Webhook]++
		return orig(c)
	}
	t.Cleanup(func() { compileConfig = orig })
	up := testutil.NewUpstream(t)
	file := testutil.TempFile(t, "idemproxy.yaml", "upstream: "+up.URL+`
routes:
  - path: /hook
    webhook: github
    webhook_secrets: [env:COMPILE_ONCE_SECRET]
  - path: /orders
    ttl: 1h
`)
	t.Setenv("COMPILE_ONCE_SECRET", "s3cret")
	args := []string{"--config", file}
	cfg, err := ParseArgs(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if compiles["github"] != 1 || compiles[""] != 2 {
		t.Errorf("start: compiles %v; want the webhook route once (one read of its secrets) and the top level and /orders once each", compiles)
	}
	clear(compiles)
	next, err := cfg.reload()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Reload(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	if compiles["github"] != 1 || compiles[""] != 2 {
		t.Errorf("reload: compiles %v; want each route once", compiles)
	}
}
