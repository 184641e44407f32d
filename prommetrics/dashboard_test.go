package prommetrics_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/prommetrics/metricstest"
	"github.com/prometheus/client_golang/prometheus"
)

// A Go service that registers what the package doc says (Requests as the
// observer, Memory for the memory store) exports every metric the dashboard
// and the alert rules query but the proxy's own, with the type, help, outcomes
// and buckets the proxy and Caddy give them (as TestCaddyMetricsFitTheDashboard
// and TestDashboardAndRulesMatchTheMetrics check for those two).
func TestGoServiceMetricsFitTheDashboard(t *testing.T) {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := prometheus.NewPedanticRegistry()
	requests := prommetrics.NewRequests()
	if err := prommetrics.Register(reg, requests, prommetrics.NewMemory(store)); err != nil {
		t.Fatal(err)
	}
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.Observer = requests.Observe })
	if err != nil {
		t.Fatal(err)
	}
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for _, body := range []string{"a", "a", "b"} {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", "order-1")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	s := metricstest.Scrape(t, "a Go service", reg)
	metricstest.Check(t, s, "../examples", slices.Concat(prommetrics.ProxyOnly, prommetrics.LocalCacheMetrics)...)
	metricstest.Same(t, s, metricstest.Reference(t))
	metricstest.Lint(t, s)
	for outcome, want := range map[string]string{"stored": "1", "replayed": "1", "mismatch": "1", "conflict": "0"} {
		if got := s.Value(prommetrics.RequestsTotal, "outcome", outcome); got != want {
			t.Errorf("%s{outcome=%q} = %q, want %s\n%s", prommetrics.RequestsTotal, outcome, got, want, s.Text)
		}
	}
	if got := s.Value(prommetrics.MemoryRecords); got != "1" {
		t.Errorf("%s = %q, want 1", prommetrics.MemoryRecords, got)
	}
}

// Every metric package prommetrics defines, the proxy's, the memory store's
// and the local cache's included, is graphed or alerted on in examples/.
func TestEveryMetricIsGraphed(t *testing.T) {
	metricstest.Check(t, metricstest.Reference(t), "../examples")
}
