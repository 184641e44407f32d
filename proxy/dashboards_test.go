package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/prommetrics/metricstest"
	"github.com/idemproxy/idemproxy/proxy"
)

// The Grafana dashboard and the alert rules in examples/ use only metrics and
// outcome labels the proxy exports (read from a live /metrics), every
// idemproxy_ metric it exports is on them with the type, help, outcomes and buckets of package
// prommetrics (as Caddy's: TestCaddyMetricsFitTheDashboard), promtool
// accepts the text, and every dashboard query parses as PromQL (promtool; CI
// installs it).
func TestDashboardAndRulesMatchTheMetrics(t *testing.T) {
	cfg := proxy.DefaultConfig()
	cfg.Upstream = "http://127.0.0.1:1"
	p, err := proxy.New(context.Background(), &cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w := httptest.NewRecorder()
	p.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("/metrics: %d %s", w.Code, w.Body)
	}
	for _, family := range []string{"# TYPE go_goroutines gauge", "# TYPE go_memstats_heap_inuse_bytes gauge", "# TYPE process_resident_memory_bytes gauge", "# TYPE process_open_fds gauge"} {
		if !strings.Contains(w.Body.String(), family) {
			t.Errorf("/metrics lacks the Go runtime's or the process's %q:\n%s", family, w.Body)
		}
	}
	s := metricstest.Read(t, "the proxy", w.Body.String())
	metricstest.Check(t, s, "../examples", prommetrics.LocalCacheMetrics...)
	metricstest.Same(t, s, metricstest.Reference(t))
	metricstest.Lint(t, s)

	// The dashboard's queries are PromQL: check them as recording rules.
	promtool := metricstest.Promtool(t)
	var rec strings.Builder
	rec.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$instance", ".*")
	i := 0
	for where, e := range metricstest.Queries(t, "../examples") {
		if strings.HasPrefix(where, "dashboard") && !strings.HasPrefix(where, "dashboard variable") {
			q, _ := json.Marshal(grafana.Replace(e))
			fmt.Fprintf(&rec, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
			i++
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rec.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("the dashboard's queries do not parse: %v\n%s", err, out)
	}
}
