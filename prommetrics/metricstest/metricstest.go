// Package metricstest holds the dashboard and alert rules in examples/ to a live
// /metrics text, for the proxy's tests and the Caddy module's alike: one
// dashboard and one alert file must fit both.
package metricstest

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"
)

// Family is one idemproxy metric family of a /metrics text.
type Family struct {
	Name, Type, Help string
	Samples          []Sample
}

// Sample is one line of a family: its name (with _bucket, _sum or _count for a
// histogram), labels and value as written.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  string
}

// Surface is what one process exports: its idemproxy_* families.
type Surface struct {
	Name     string // for messages: "the proxy", "Caddy"
	Families map[string]*Family
	Text     string // the idemproxy families' lines alone
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// Read parses a Prometheus text exposition and keeps its idemproxy_* families.
// A sample line that does not parse, or one outside any declared family, fails t.
func Read(t testing.TB, name, text string) *Surface {
	t.Helper()
	s := &Surface{Name: name, Families: map[string]*Family{}}
	var keep strings.Builder
	var cur *Family
	for _, line := range strings.Split(text, "\n") {
		ours := false
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "# HELP "), strings.HasPrefix(line, "# TYPE "):
			f := strings.SplitN(line[len("# TYPE "):], " ", 2)
			if len(f) != 2 {
				t.Fatalf("%s: bad line %q", name, line)
			}
			if !strings.HasPrefix(f[0], "idemproxy_") {
				cur = nil
				continue
			}
			fam := s.Families[f[0]]
			if fam == nil {
				fam = &Family{Name: f[0]}
				s.Families[f[0]] = fam
			}
			ours = true
			if strings.HasPrefix(line, "# HELP ") {
				fam.Help = f[1]
			} else {
				fam.Type = f[1]
			}
			cur = fam
		case strings.HasPrefix(line, "#"):
			continue
		default:
			m := sampleLine.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("%s: a sample line that does not parse: %q", name, line)
			}
			if !strings.HasPrefix(m[1], "idemproxy_") {
				continue
			}
			if cur == nil || !strings.HasPrefix(m[1], cur.Name) {
				t.Fatalf("%s: sample %q outside its family's HELP and TYPE", name, line)
			}
			labels := map[string]string{}
			for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
				labels[p[1]] = p[2]
			}
			cur.Samples = append(cur.Samples, Sample{Name: m[1], Labels: labels, Value: m[3]})
			ours = true
		}
		if ours {
			keep.WriteString(line)
			keep.WriteByte('\n')
		}
	}
	s.Text = keep.String()
	return s
}

// Value is the value of the samples of name that carry labels, whatever
// other labels they carry, summed ("" when none does); labels are pairs:
// "outcome", "stored".
func (s *Surface) Value(name string, labels ...string) string {
	var found []string
	for _, f := range s.Families {
		for _, smp := range f.Samples {
			if smp.Name != name {
				continue
			}
			match := true
			for i := 0; i+1 < len(labels); i += 2 {
				v, ok := smp.Labels[labels[i]]
				match = match && ok && v == labels[i+1]
			}
			if match {
				found = append(found, smp.Value)
			}
		}
	}
	switch len(found) {
	case 0:
		return ""
	case 1:
		return found[0]
	}
	var sum float64
	for _, v := range found {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return "" // not a number: no sum
		}
		sum += f
	}
	return strconv.FormatFloat(sum, 'g', -1, 64)
}

// labelValues are the values of one label across a family's samples.
func (f *Family) labelValues(label string) []string {
	var out []string
	for _, smp := range f.Samples {
		if v, ok := smp.Labels[label]; ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// Queries are the PromQL expressions of the Grafana dashboard and the alert
// rules under examples (the repository's examples directory), by where they are.
func Queries(t testing.TB, examples string) map[string]string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query json.RawMessage
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(examples, "grafana", "idemproxy-dashboard.json"))
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
	b, err = os.ReadFile(filepath.Join(examples, "prometheus", "idemproxy-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("rules: %v", err)
	}
	exprs := map[string]string{}
	for _, pn := range dash.Panels {
		for i, tg := range pn.Targets {
			exprs[fmt.Sprintf("dashboard %q target %d", pn.Title, i)] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		var q struct{ Query string }
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			exprs[fmt.Sprintf("dashboard variable %s", v.Name)] = q.Query
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	if len(exprs) < 15 {
		t.Fatalf("only %d expressions found in the dashboard and the rules", len(exprs))
	}
	return exprs
}

var (
	metricRef  = regexp.MustCompile(`\bidemproxy_[a-z_]+`)
	outcomeRef = regexp.MustCompile(`outcome(?:=|!=|=~|!~)"([^"]*)"`)
)

// Check holds the dashboard and the alert rules under examples to s: every
// idemproxy metric they query is exported by s, but for those in absent (the
// metrics s has no meaning for: each must be queried, and not exported); every
// outcome they match on is one s declares; and every idemproxy metric s exports
// is graphed or alerted on.
func Check(t testing.TB, s *Surface, examples string, absent ...string) {
	t.Helper()
	if len(s.Families) == 0 {
		t.Fatalf("%s exports no idemproxy metric", s.Name)
	}
	var outcomes []string
	if f := s.Families[prommetrics.RequestsTotal]; f != nil {
		outcomes = f.labelValues("outcome")
	}
	seen := map[string]bool{}
	exprs := Queries(t, examples)
	where := make([]string, 0, len(exprs))
	for w := range exprs {
		where = append(where, w)
	}
	sort.Strings(where)
	for _, w := range where {
		e := exprs[w]
		for _, m := range metricRef.FindAllString(e, -1) {
			base := m
			if h := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count"); h != m {
				if f := s.Families[h]; f != nil && f.Type == "histogram" || slices.Contains(absent, h) {
					base = h // a histogram's series
				}
			}
			seen[base] = true
			if slices.Contains(absent, base) {
				continue
			}
			if f := s.Families[base]; f == nil || f.Type == "" {
				t.Errorf("%s: %s is not exported by %s", w, m, s.Name)
			}
		}
		for _, m := range outcomeRef.FindAllStringSubmatch(e, -1) {
			for _, o := range strings.Split(m[1], "|") {
				if !slices.Contains(outcomes, o) {
					t.Errorf("%s: outcome %q is not declared by %s (it declares %v)", w, o, s.Name, outcomes)
				}
			}
		}
	}
	for name := range s.Families {
		if !seen[name] {
			t.Errorf("%s exports %s, but it is neither graphed nor alerted on", s.Name, name)
		}
		if slices.Contains(absent, name) {
			t.Errorf("%s exports %s, listed as absent from it", s.Name, name)
		}
	}
	for _, name := range absent {
		if !seen[name] {
			t.Errorf("%s is listed as absent from %s but no query uses it: a stale list", name, s.Name)
		}
	}
}

// Reference is every metric of package prommetrics, as the shared collectors export
// them: what any surface's families must equal (see Same).
func Reference(t testing.TB) *Surface {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := prommetrics.Register(reg, prommetrics.NewRequests(), prommetrics.NewUpstream(), prommetrics.NewSettled(), prommetrics.NewReconcile(), prommetrics.NewMemory(fakeMemory{}), prommetrics.NewLocalCache(fakeLocalCache{})); err != nil {
		t.Fatal(err)
	}
	return Scrape(t, "package prommetrics", reg)
}

// Scrape reads g as /metrics serves it (promhttp, the text format).
func Scrape(t testing.TB, name string, g prometheus.Gatherer) *Surface {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("%s: /metrics answered %d: %s", name, w.Code, w.Body)
	}
	return Read(t, name, w.Body.String())
}

type fakeMemory struct{}

// fakeLocalCache is a shared store with its local cache on, for Reference.
type fakeLocalCache struct{ cache.Store }

func (fakeLocalCache) LocalCacheStats() (cache.LocalCacheStats, bool) {
	return cache.LocalCacheStats{MaxBytes: 1}, true
}

func (fakeMemory) Len() int64                           { return 0 }
func (fakeMemory) Bytes() int64                         { return 0 }
func (fakeMemory) Bounds() (maxRecords, maxBytes int64) { return 1, 1 }

// Same checks that every family s exports is one of ref's, with its type, help
// and labels (the outcomes declared, a histogram's buckets): one name, one
// meaning.
func Same(t testing.TB, s, ref *Surface) {
	t.Helper()
	for name, f := range s.Families {
		r := ref.Families[name]
		if r == nil {
			t.Errorf("%s exports %s, which package prommetrics does not define", s.Name, name)
			continue
		}
		if f.Type != r.Type || f.Help != r.Help {
			t.Errorf("%s: %s is %s %q; package prommetrics makes it %s %q", s.Name, name, f.Type, f.Help, r.Type, r.Help)
		}
		if got, want := shape(f), shape(r); got != want {
			t.Errorf("%s: %s has the labels %s; package prommetrics gives it %s", s.Name, name, got, want)
		}
	}
}

// shape is a family's labels per sample name: its outcomes, its buckets (a
// route's name is each surface's own).
func shape(f *Family) string {
	set := map[string]bool{}
	for _, smp := range f.Samples {
		var names []string
		for k, v := range smp.Labels {
			if k == "route" {
				v = "*" // a surface's own routes
			}
			names = append(names, k+"="+v)
		}
		sort.Strings(names)
		set[smp.Name+"{"+strings.Join(names, ",")+"}"] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// Promtool is the path of promtool. Without it the test is skipped, but fails
// under CI (CI installs it).
func Promtool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed (apt-get install prometheus); CI needs it")
		}
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	return p
}

// Lint runs promtool check metrics on s's families: the text parses, and follows
// Prometheus's naming rules.
func Lint(t testing.TB, s *Surface) {
	t.Helper()
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(s.Text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on %s's idemproxy metrics: %v\n%s\n%s", s.Name, err, out, s.Text)
	}
}
