package prommetrics_test

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A Go service's metrics: the core's observer counts each tracked request, the
// memory store's gauges are read at each scrape, and /metrics serves them with
// the names the dashboard and the alert rules query.
func Example() {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	requests := prommetrics.NewRequests()
	reg.MustRegister(requests, prommetrics.NewMemory(store))

	idem, err := middleware.New(store, func(s *middleware.Settings) {
		s.Observer = requests.Observe
	})
	if err != nil {
		log.Fatal(err)
	}
	api := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	mux := http.NewServeMux()
	mux.Handle("/charges", api)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	for _, body := range []string{`{"amount":100}`, `{"amount":100}`, `{"amount":999}`} {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", "order-1")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	lines := bufio.NewScanner(w.Body)
	for lines.Scan() { // the counts that moved, and the records held
		l := lines.Text()
		if strings.HasPrefix(l, prommetrics.RequestsTotal) && !strings.HasSuffix(l, " 0") ||
			strings.HasPrefix(l, prommetrics.StoreDuration+"_count") ||
			strings.HasPrefix(l, prommetrics.MemoryRecords+" ") {
			fmt.Println(l)
		}
	}
	// Output:
	// idemproxy_memory_records 1
	// idemproxy_requests_total{outcome="mismatch",route=""} 1
	// idemproxy_requests_total{outcome="replayed",route=""} 1
	// idemproxy_requests_total{outcome="stored",route=""} 1
	// idemproxy_store_duration_seconds_count 3
}

// One Handler per route, each counting under its own route label; requests the
// core does not track (here: GET) counted as untracked.
func ExampleRequests_Route() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	requests := prommetrics.NewRequests()
	reg := prometheus.NewRegistry()
	reg.MustRegister(requests)

	mux := http.NewServeMux()
	for _, path := range []string{"/charges", "/refunds"} {
		counts := requests.Route(path)
		idem, _ := middleware.New(store, func(s *middleware.Settings) {
			s.Observer = counts.Observe
			s.KeyNamespace = path
		})
		api := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !idem.Tracked(r.Method) {
				counts.Untracked()
			}
			api.ServeHTTP(w, r)
		}))
	}

	for _, req := range []struct{ method, path string }{{"POST", "/charges"}, {"POST", "/charges"}, {"GET", "/charges"}, {"POST", "/refunds"}} {
		r := httptest.NewRequest(req.method, req.path, nil)
		r.Header.Set("Idempotency-Key", "k-1")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != prommetrics.RequestsTotal {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				l := m.GetLabel() // outcome, route
				fmt.Printf("%s %s %v\n", l[0].GetValue(), l[1].GetValue(), v)
			}
		}
	}
	// Output:
	// replayed /charges 1
	// stored /charges 1
	// stored /refunds 1
	// untracked /charges 1
}
