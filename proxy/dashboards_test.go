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
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/proxy"
	"go.yaml.in/yaml/v3"
)

// The Grafana dashboard and the alert rules in examples/ use only metrics and
// outcome labels the proxy exports (read from a live /metrics), and every
// dashboard query parses as PromQL (promtool; CI installs it).
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
	exported := w.Body.String()

	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err := os.ReadFile("../examples/grafana/idemproxy-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	b, err = os.ReadFile("../examples/prometheus/idemproxy-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("rules: %v", err)
	}
	exprs := map[string]string{} // where → expr
	for _, pn := range dash.Panels {
		for i, tg := range pn.Targets {
			exprs[fmt.Sprintf("dashboard %q target %d", pn.Title, i)] = tg.Expr
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	if len(exprs) < 15 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	metric := regexp.MustCompile(`\bidemproxy_[a-z_]+`)
	outcome := regexp.MustCompile(`outcome(?:=|!=|=~|!~)"([^"]*)"`)
	known := []string{"untracked"}
	for _, o := range middleware.Outcomes {
		known = append(known, string(o))
	}
	seen := map[string]bool{}
	for where, e := range exprs {
		for _, m := range metric.FindAllString(e, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
			if !strings.Contains(exported, "# TYPE "+base+" ") {
				t.Errorf("%s: %s is not exported by the proxy", where, m)
			}
			seen[base] = true
		}
		for _, m := range outcome.FindAllStringSubmatch(e, -1) {
			for _, o := range strings.Split(m[1], "|") {
				if !slices.Contains(known, o) {
					t.Errorf("%s: outcome %q does not exist", where, o)
				}
			}
		}
	}
	// Every metric family the proxy exports is on the dashboard.
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(exported, -1) {
		if !seen[m[1]] {
			t.Errorf("%s is exported but neither graphed nor alerted on", m[1])
		}
	}

	// The dashboard's queries are PromQL: check them as recording rules.
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed (apt-get install prometheus); CI needs it")
		}
		t.Skip("promtool not installed: the dashboard's PromQL is not parsed (apt-get install prometheus)")
	}
	var rec strings.Builder
	rec.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$instance", ".*")
	i := 0
	for where, e := range exprs {
		if strings.HasPrefix(where, "dashboard") {
			q, _ := json.Marshal(grafana.Replace(e))
			fmt.Fprintf(&rec, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
			i++
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	os.WriteFile(path, []byte(rec.String()), 0o600)
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("the dashboard's queries do not parse: %v\n%s", err, out)
	}
}
