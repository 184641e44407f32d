package prommetrics_test

import (
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/prommetrics/metricstest"
	"github.com/prometheus/client_golang/prometheus"
)

func scrape(t *testing.T, cs ...prometheus.Collector) *metricstest.Surface {
	t.Helper()
	reg := prometheus.NewPedanticRegistry() // Collect must match Describe
	if err := prommetrics.Register(reg, cs...); err != nil {
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
	r := prommetrics.NewRequests()
	s := scrape(t, r)
	for _, o := range append(middleware.Outcomes, prommetrics.Untracked) {
		want(t, s, "0", prommetrics.RequestsTotal, "outcome", string(o))
	}
	want(t, s, "0", prommetrics.StoreDuration+"_count")

	r.Observe(middleware.Event{Outcome: middleware.OutcomeStored, StoreDuration: 300 * time.Microsecond})
	r.Observe(middleware.Event{Outcome: middleware.OutcomeStored, StoreDuration: 2 * time.Second})
	r.Observe(middleware.Event{Outcome: middleware.OutcomeInvalid}) // no claim: not timed
	r.Observe(middleware.Event{Outcome: "brand_new"})               // an outcome newer than the list
	r.Untracked()
	s = scrape(t, r)
	want(t, s, "2", prommetrics.RequestsTotal, "outcome", "stored")
	want(t, s, "1", prommetrics.RequestsTotal, "outcome", "invalid")
	want(t, s, "1", prommetrics.RequestsTotal, "outcome", "brand_new")
	want(t, s, "1", prommetrics.RequestsTotal, "outcome", prommetrics.Untracked)
	want(t, s, "0", prommetrics.RequestsTotal, "outcome", "replayed")
	want(t, s, "2", prommetrics.StoreDuration+"_count")
	want(t, s, "0", prommetrics.StoreDuration+"_bucket", "le", "0.00025")
	want(t, s, "1", prommetrics.StoreDuration+"_bucket", "le", "0.0005")
	want(t, s, "1", prommetrics.StoreDuration+"_bucket", "le", "1")
	want(t, s, "2", prommetrics.StoreDuration+"_bucket", "le", "+Inf")
	want(t, s, "2.0003", prommetrics.StoreDuration+"_sum")
}

func TestUpstreamCountsInFlightAndTimes(t *testing.T) {
	u := prommetrics.NewUpstream()
	start := u.Start()
	u.Start() // a second call, still running
	want(t, scrape(t, u), "2", prommetrics.UpstreamInFlight)
	u.Done(start.Add(-3 * time.Second)) // it took 3s
	s := scrape(t, u)
	want(t, s, "1", prommetrics.UpstreamInFlight)
	want(t, s, "1", prommetrics.UpstreamDuration+"_count")
	want(t, s, "0", prommetrics.UpstreamDuration+"_bucket", "le", "2.5")
	want(t, s, "1", prommetrics.UpstreamDuration+"_bucket", "le", "5")
}

func TestSettledCountsReleasesAndResolves(t *testing.T) {
	st := prommetrics.NewSettled()
	st.Released()
	st.Released()
	st.Resolved()
	s := scrape(t, st)
	want(t, s, "2", prommetrics.UnknownReleased)
	want(t, s, "1", prommetrics.UnknownResolved)
}

type stats struct{ records, bytes atomic.Int64 }

func (s *stats) Len() int64                           { return s.records.Load() }
func (s *stats) Bytes() int64                         { return s.bytes.Load() }
func (s *stats) Bounds() (maxRecords, maxBytes int64) { return 1000, 1 << 20 }

func TestMemoryReadsTheStoreAtEachScrape(t *testing.T) {
	var st stats
	m := prommetrics.NewMemory(&st)
	want(t, scrape(t, m), "0", prommetrics.MemoryRecords)
	st.records.Store(7)
	st.bytes.Store(4096)
	s := scrape(t, m)
	want(t, s, "7", prommetrics.MemoryRecords)
	want(t, s, "4096", prommetrics.MemoryBytes)
	want(t, s, "1000", prommetrics.MemoryMaxRecords)
	want(t, s, "1.048576e+06", prommetrics.MemoryMaxBytes)
}

// Register takes the same collector twice (two handlers of one Caddy config),
// and a second Memory, without error, and keeps the first; a collector that
// clashes with a registered one is an error.
func TestRegisterToleratesTheSameMetricsOnly(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r := prommetrics.NewRequests()
	var a, b stats
	a.records.Store(1)
	b.records.Store(2)
	if err := prommetrics.Register(reg, r, prommetrics.NewMemory(&a)); err != nil {
		t.Fatal(err)
	}
	if err := prommetrics.Register(reg, r, prommetrics.NewMemory(&b)); err != nil {
		t.Fatalf("registering the same metrics again: %v", err)
	}
	r.Untracked()
	s := metricstest.Scrape(t, "test", reg)
	want(t, s, "1", prommetrics.RequestsTotal, "outcome", prommetrics.Untracked)
	want(t, s, "1", prommetrics.MemoryRecords)

	clash := prometheus.NewCounter(prometheus.CounterOpts{Name: prommetrics.RequestsTotal, Help: "another"})
	if err := prommetrics.Register(reg, clash); err == nil {
		t.Fatal("a different idemproxy_requests_total was registered beside the first")
	}
}

// BenchmarkRequestsObserve is the metrics' share of the observer, once per
// tracked request.
func BenchmarkRequestsObserve(b *testing.B) {
	r := prommetrics.NewRequests()
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
	u, r := prommetrics.NewUpstream(), prommetrics.NewRequests()
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
	r := prommetrics.NewRequests()
	charges := r.Route("/charges")
	r.Route("/orders")
	charges.Observe(middleware.Event{Outcome: middleware.OutcomeStored})
	charges.Untracked()
	r.Observe(middleware.Event{Outcome: middleware.OutcomeStored})
	s := scrape(t, r)
	want(t, s, "1", prommetrics.RequestsTotal, "outcome", "stored", "route", "/charges")
	want(t, s, "1", prommetrics.RequestsTotal, "outcome", prommetrics.Untracked, "route", "/charges")
	want(t, s, "0", prommetrics.RequestsTotal, "outcome", "stored", "route", "/orders")
	want(t, s, "1", prommetrics.RequestsTotal, "outcome", "stored", "route", "")
	want(t, s, "2", prommetrics.RequestsTotal, "outcome", "stored") // summed over the routes
}

// cached is a store with a local cache (cache.LocalCacher); on false: none.
type cached struct {
	cache.Store
	on bool
	st cache.LocalCacheStats
}

func (c *cached) LocalCacheStats() (cache.LocalCacheStats, bool) { return c.st, c.on }

func TestLocalCacheReadsTheStoreAtEachScrape(t *testing.T) {
	if prommetrics.NewLocalCache(&cached{}) != nil {
		t.Fatal("metrics for a store whose local cache is off")
	}
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if prommetrics.NewLocalCache(mem) != nil {
		t.Fatal("local cache metrics for the memory store")
	}
	s := &cached{on: true, st: cache.LocalCacheStats{MaxBytes: 64 << 20, Bytes: 4096, Records: 3, Hits: 7, Misses: 2,
		Invalidations: 1, Flushes: 1, Untrusted: 1500 * time.Millisecond}}
	lc := prommetrics.NewLocalCache(s)
	got := scrape(t, lc)
	for name, value := range map[string]string{
		prommetrics.LocalCacheHits: "7", prommetrics.LocalCacheMisses: "2", prommetrics.LocalCacheRecords: "3",
		prommetrics.LocalCacheBytes: "4096", prommetrics.LocalCacheMaxBytes: "6.7108864e+07",
		prommetrics.LocalCacheInvalidations: "1", prommetrics.LocalCacheFlushes: "1", prommetrics.LocalCacheUntrusted: "1.5",
	} {
		want(t, got, value, name)
	}
	s.st.Hits = 9
	want(t, scrape(t, lc), "9", prommetrics.LocalCacheHits)
}
