package metrics_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/metrics"
	"github.com/idemproxy/idemproxy/internal/metrics/metricstest"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

func scrape(t *testing.T, cs ...prometheus.Collector) *metricstest.Surface {
	t.Helper()
	reg := prometheus.NewPedanticRegistry() // Collect must match Describe
	if err := metrics.Register(reg, cs...); err != nil {
		t.Fatal(err)
	}
	return metricstest.Scrape(t, "test", reg)
}

func want(t *testing.T, s *metricstest.Surface, value, name string, labels ...string) {
	t.Helper()
	if got := s.Value(name, labels...); got != value {
		t.Errorf("%s%v = %q, want %q\n%s", name, labels, got, value, s.Text)
	}
}

func TestRequestsDeclaresEveryOutcomeAndCountsEvents(t *testing.T) {
	r := metrics.NewRequests()
	s := scrape(t, r)
	for _, o := range append(middleware.Outcomes, metrics.Untracked) {
		want(t, s, "0", metrics.RequestsTotal, "outcome", string(o))
	}
	want(t, s, "0", metrics.StoreDuration+"_count")

	r.Observe(middleware.Event{Outcome: middleware.OutcomeStored, StoreDuration: 300 * time.Microsecond})
	r.Observe(middleware.Event{Outcome: middleware.OutcomeStored, StoreDuration: 2 * time.Second})
	r.Observe(middleware.Event{Outcome: middleware.OutcomeInvalid}) // no claim: not timed
	r.Observe(middleware.Event{Outcome: "brand_new"})               // an outcome newer than the list
	r.Untracked()
	s = scrape(t, r)
	want(t, s, "2", metrics.RequestsTotal, "outcome", "stored")
	want(t, s, "1", metrics.RequestsTotal, "outcome", "invalid")
	want(t, s, "1", metrics.RequestsTotal, "outcome", "brand_new")
	want(t, s, "1", metrics.RequestsTotal, "outcome", metrics.Untracked)
	want(t, s, "0", metrics.RequestsTotal, "outcome", "replayed")
	want(t, s, "2", metrics.StoreDuration+"_count")
	want(t, s, "0", metrics.StoreDuration+"_bucket", "le", "0.00025")
	want(t, s, "1", metrics.StoreDuration+"_bucket", "le", "0.0005")
	want(t, s, "1", metrics.StoreDuration+"_bucket", "le", "1")
	want(t, s, "2", metrics.StoreDuration+"_bucket", "le", "+Inf")
	want(t, s, "2.0003", metrics.StoreDuration+"_sum")
}

func TestUpstreamCountsInFlightAndTimes(t *testing.T) {
	u := metrics.NewUpstream()
	start := u.Start()
	u.Start() // a second call, still running
	want(t, scrape(t, u), "2", metrics.UpstreamInFlight)
	u.Done(start.Add(-3 * time.Second)) // it took 3s
	s := scrape(t, u)
	want(t, s, "1", metrics.UpstreamInFlight)
	want(t, s, "1", metrics.UpstreamDuration+"_count")
	want(t, s, "0", metrics.UpstreamDuration+"_bucket", "le", "2.5")
	want(t, s, "1", metrics.UpstreamDuration+"_bucket", "le", "5")
}

func TestSettledCountsReleasesAndResolves(t *testing.T) {
	st := metrics.NewSettled()
	st.Released()
	st.Released()
	st.Resolved()
	s := scrape(t, st)
	want(t, s, "2", metrics.UnknownReleased)
	want(t, s, "1", metrics.UnknownResolved)
}

type stats struct{ records, bytes atomic.Int64 }

func (s *stats) Len() int64                           { return s.records.Load() }
func (s *stats) Bytes() int64                         { return s.bytes.Load() }
func (s *stats) Bounds() (maxRecords, maxBytes int64) { return 1000, 1 << 20 }

func TestMemoryReadsTheStoreAtEachScrape(t *testing.T) {
	var st stats
	m := metrics.NewMemory(&st)
	want(t, scrape(t, m), "0", metrics.MemoryRecords)
	st.records.Store(7)
	st.bytes.Store(4096)
	s := scrape(t, m)
	want(t, s, "7", metrics.MemoryRecords)
	want(t, s, "4096", metrics.MemoryBytes)
	want(t, s, "1000", metrics.MemoryMaxRecords)
	want(t, s, "1.048576e+06", metrics.MemoryMaxBytes)
}

// Register takes the same collector twice (two handlers of one Caddy config),
// and a second Memory, without error, and keeps the first; a collector that
// clashes with a registered one is an error.
func TestRegisterToleratesTheSameMetricsOnly(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r := metrics.NewRequests()
	var a, b stats
	a.records.Store(1)
	b.records.Store(2)
	if err := metrics.Register(reg, r, metrics.NewMemory(&a)); err != nil {
		t.Fatal(err)
	}
	if err := metrics.Register(reg, r, metrics.NewMemory(&b)); err != nil {
		t.Fatalf("registering the same metrics again: %v", err)
	}
	r.Untracked()
	s := metricstest.Scrape(t, "test", reg)
	want(t, s, "1", metrics.RequestsTotal, "outcome", metrics.Untracked)
	want(t, s, "1", metrics.MemoryRecords)

	clash := prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.RequestsTotal, Help: "another"})
	if err := metrics.Register(reg, clash); err == nil {
		t.Fatal("a different idemproxy_requests_total was registered beside the first")
	}
}

// BenchmarkRequestsObserve is the metrics' share of the observer, once per
// tracked request.
func BenchmarkRequestsObserve(b *testing.B) {
	r := metrics.NewRequests()
	ev := middleware.Event{Outcome: middleware.OutcomeStored, StoreDuration: 150 * time.Microsecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Observe(ev)
		}
	})
}

// BenchmarkUpstream is the proxy's bracket around each first execution, with
// the count of an untracked request beside it.
func BenchmarkUpstream(b *testing.B) {
	u, r := metrics.NewUpstream(), metrics.NewRequests()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u.Done(u.Start())
			r.Untracked()
		}
	})
}

// Each route's counters are its own series, declared at zero; route "" (the
// Caddy module's, and requests no route is named for) is apart.
func TestRequestsByRoute(t *testing.T) {
	r := metrics.NewRequests()
	charges := r.Route("/charges")
	r.Route("/orders")
	charges.Observe(middleware.Event{Outcome: middleware.OutcomeStored})
	charges.Untracked()
	r.Observe(middleware.Event{Outcome: middleware.OutcomeStored})
	s := scrape(t, r)
	want(t, s, "1", metrics.RequestsTotal, "outcome", "stored", "route", "/charges")
	want(t, s, "1", metrics.RequestsTotal, "outcome", metrics.Untracked, "route", "/charges")
	want(t, s, "0", metrics.RequestsTotal, "outcome", "stored", "route", "/orders")
	want(t, s, "1", metrics.RequestsTotal, "outcome", "stored", "route", "")
	want(t, s, "2", metrics.RequestsTotal, "outcome", "stored") // summed over the routes
}
