// Package prommetrics is idemproxy's Prometheus metrics, for a Go program that
// uses package middleware: the names, labels, help and buckets the reverse
// proxy and the Caddy module export, so the Grafana dashboard
// (examples/grafana) and the alert rules (examples/prometheus) in the
// repository serve a Go service too.
//
// A Go service needs two of the collectors. Requests counts every tracked
// request by outcome (idemproxy_requests_total{outcome,route}) and times the
// store's claim (idemproxy_store_duration_seconds); its Observe method is the
// core's observer:
//
//	requests := prommetrics.NewRequests()
//	prometheus.MustRegister(requests)
//	idem, err := middleware.New(store, func(s *middleware.Settings) {
//		s.Observer = requests.Observe
//	})
//
// With more than one handler, give each its route's counters
// (requests.Route("/charges").Observe). The core reports tracked requests
// only: count the others with Untracked where you see them, or the dashboard's
// untracked series stays at zero. Memory is the memory store's use and bounds
// (idemproxy_memory_*), read at each scrape: NewMemory(store) for a
// *memstore.Store. LocalCache is the Redis or PostgreSQL store's local cache
// of completed records (idemproxy_local_cache_*): NewLocalCache(store).
//
// The rest is what the proxy adds, and a Go program that does the same may use
// them too: Upstream (first executions forwarded upstream), Settled (held
// unknown outcomes an operator settled) and Reconcile (reconcile requests and
// jobs, package reconcile). ProxyOnly names their metrics: the dashboard's
// panels for them stay empty without them.
//
// The core itself imports no metrics library: this package imports
// middleware, never the other way round.
package prommetrics

import (
	"errors"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	RequestsTotal    = "idemproxy_requests_total"
	StoreDuration    = "idemproxy_store_duration_seconds"
	UpstreamDuration = "idemproxy_upstream_duration_seconds"
	UpstreamInFlight = "idemproxy_upstream_in_flight"
	UnknownReleased  = "idemproxy_unknown_released_total"
	UnknownResolved  = "idemproxy_unknown_resolved_total"
	MemoryRecords    = "idemproxy_memory_records"
	MemoryBytes      = "idemproxy_memory_bytes"
	MemoryMaxRecords = "idemproxy_memory_max_records"
	MemoryMaxBytes   = "idemproxy_memory_max_bytes"

	LocalCacheHits          = "idemproxy_local_cache_hits_total"
	LocalCacheMisses        = "idemproxy_local_cache_misses_total"
	LocalCacheRecords       = "idemproxy_local_cache_records"
	LocalCacheBytes         = "idemproxy_local_cache_bytes"
	LocalCacheMaxBytes      = "idemproxy_local_cache_max_bytes"
	LocalCacheInvalidations = "idemproxy_local_cache_invalidations_total"
	LocalCacheFlushes       = "idemproxy_local_cache_flushes_total"
	LocalCacheUntrusted     = "idemproxy_local_cache_untrusted_seconds_total"
)

// ProxyOnly are the metrics the proxy exports and the Caddy module does not
// (Upstream, Settled, Reconcile): under Caddy the rest of the route is not one
// upstream call, there is no admin API for keys, and no reconcile.
var ProxyOnly = []string{UpstreamDuration, UpstreamInFlight, UnknownReleased, UnknownResolved, ReconcileAttempts, ReconcileOutcomes}

// MemoryMetrics are the memory store's metrics (NewMemory): a process on a
// shared store exports none of them.
var MemoryMetrics = []string{MemoryRecords, MemoryBytes, MemoryMaxRecords, MemoryMaxBytes}

// LocalCacheMetrics are the metrics of a shared store's local cache of
// completed records (NewLocalCache): a process on the memory store, or with
// the cache off, exports none of them.
var LocalCacheMetrics = []string{LocalCacheHits, LocalCacheMisses, LocalCacheRecords, LocalCacheBytes, LocalCacheMaxBytes, LocalCacheInvalidations, LocalCacheFlushes, LocalCacheUntrusted}

// Untracked is the outcome label of a request that reached idemproxy with a
// method it does not track (in the proxy also: on a disabled route, or refused
// for a path that is not canonical). It went on untouched, and is no
// middleware.Outcome: the core never saw it.
const Untracked = "untracked"

// Histogram buckets, in seconds.
var (
	// StoreBuckets: one claim is a round trip to the store (sub-millisecond in
	// memory, a few milliseconds to Redis or PostgreSQL).
	StoreBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	// UpstreamBuckets: the API behind the proxy, up to a minute.
	UpstreamBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

// Requests counts requests by outcome and route (every middleware.Outcomes
// value and Untracked, declared at zero for each route named) and times the
// store's claim call. It is a prometheus.Collector.
type Requests struct {
	group
	total *prometheus.CounterVec
	any   *RouteRequests // route ""
	claim prometheus.Histogram
}

// RouteRequests counts one route's requests (Requests.Route).
type RouteRequests struct {
	r         *Requests
	route     string
	byOutcome map[middleware.Outcome]prometheus.Counter
	untracked prometheus.Counter
}

// NewRequests returns the counters at zero.
func NewRequests() *Requests {
	r := &Requests{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RequestsTotal,
			Help: "Requests by outcome and route (the configured path of the route whose settings applied; empty where no route is named); untracked ones (a method not tracked, a disabled route) went on untouched.",
		}, []string{"outcome", "route"}),
		claim: histogram(StoreDuration, "Latency of the store's claim-or-get call.", StoreBuckets),
	}
	r.any = r.Route("")
	r.group = group{r.total, r.claim}
	return r
}

// Route returns the counters of one route, every outcome declared at zero.
// Routes are few (the configured ones): call it once per route and keep it.
func (r *Requests) Route(name string) *RouteRequests {
	rr := &RouteRequests{r: r, route: name, byOutcome: make(map[middleware.Outcome]prometheus.Counter, len(middleware.Outcomes))}
	for _, o := range middleware.Outcomes {
		rr.byOutcome[o] = r.total.WithLabelValues(string(o), name)
	}
	rr.untracked = r.total.WithLabelValues(Untracked, name)
	return rr
}

// Any is the counters of route "": requests no route is named for.
func (r *Requests) Any() *RouteRequests { return r.any }

// Observe counts one tracked request under route "": it is a
// middleware.Settings.Observer (or call it from yours).
func (r *Requests) Observe(ev middleware.Event) { r.any.Observe(ev) }

// Untracked counts a request idemproxy let through without tracking it,
// under route "".
func (r *Requests) Untracked() { r.any.Untracked() }

// Observe counts one tracked request of the route.
func (rr *RouteRequests) Observe(ev middleware.Event) {
	if c, ok := rr.byOutcome[ev.Outcome]; ok {
		c.Inc()
	} else { // an outcome newer than this list: counted all the same
		rr.r.total.WithLabelValues(string(ev.Outcome), rr.route).Inc()
	}
	if ev.StoreDuration > 0 {
		rr.r.claim.Observe(ev.StoreDuration.Seconds())
	}
}

// Untracked counts a request of the route let through without tracking it.
func (rr *RouteRequests) Untracked() { rr.untracked.Inc() }

// Upstream times the proxy's first executions forwarded upstream and counts
// those running. It is a prometheus.Collector.
type Upstream struct {
	group
	duration prometheus.Histogram
	inFlight prometheus.Gauge
}

// NewUpstream returns the histogram and gauge at zero.
func NewUpstream() *Upstream {
	u := &Upstream{
		duration: histogram(UpstreamDuration, "Latency of first executions forwarded upstream.", UpstreamBuckets),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: UpstreamInFlight, Help: "First executions currently running upstream."}),
	}
	u.group = group{u.duration, u.inFlight}
	return u
}

// Start marks a first execution sent upstream; pass what it returns to Done
// when the call is over.
func (u *Upstream) Start() time.Time {
	u.inFlight.Inc()
	return time.Now()
}

// Done marks the end of the call Start began.
func (u *Upstream) Done(start time.Time) {
	u.duration.Observe(time.Since(start).Seconds())
	u.inFlight.Dec()
}

// Settled counts held unknown outcomes an operator settled through the proxy's
// admin API (or idemproxy keys). It is a prometheus.Collector.
type Settled struct {
	group
	released, resolved prometheus.Counter
}

// NewSettled returns the counters at zero.
func NewSettled() *Settled {
	s := &Settled{
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: UnknownReleased,
			Help: "Unknown outcomes released by an operator (admin API or idemproxy keys release).",
		}),
		resolved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: UnknownResolved,
			Help: "Unknown outcomes resolved by an operator with a response to replay (admin API or idemproxy keys resolve).",
		}),
	}
	s.group = group{s.released, s.resolved}
	return s
}

// Released counts a held unknown outcome released: its next retry runs.
func (s *Settled) Released() { s.released.Inc() }

// Resolved counts a held unknown outcome resolved with a response to replay.
func (s *Settled) Resolved() { s.resolved.Inc() }

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// group is a prometheus.Collector of the collectors in it.
type group []prometheus.Collector

// Describe implements prometheus.Collector.
func (g group) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range g {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (g group) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g {
		c.Collect(ch)
	}
}

// MemoryStats is what the memory store's gauges read; *memstore.Store has it.
type MemoryStats interface {
	Len() int64                           // records held
	Bytes() int64                         // bytes held (approximate)
	Bounds() (maxRecords, maxBytes int64) // the bounds
}

var (
	memRecords    = prometheus.NewDesc(MemoryRecords, "Records held by the memory store.", nil, nil)
	memBytes      = prometheus.NewDesc(MemoryBytes, "Approximate bytes held by the memory store's records.", nil, nil)
	memMaxRecords = prometheus.NewDesc(MemoryMaxRecords, "The memory store's bound on records (memory_max_records).", nil, nil)
	memMaxBytes   = prometheus.NewDesc(MemoryMaxBytes, "The memory store's bound on bytes (memory_max_bytes).", nil, nil)
)

// Memory is the memory store's use and bounds, read at each scrape. It is a
// prometheus.Collector; two of them describe the same metrics, so a registry
// takes one (see Register).
type Memory struct{ s MemoryStats }

// NewMemory returns the gauges of s.
func NewMemory(s MemoryStats) *Memory { return &Memory{s: s} }

// Describe implements prometheus.Collector.
func (m *Memory) Describe(ch chan<- *prometheus.Desc) {
	ch <- memRecords
	ch <- memBytes
	ch <- memMaxRecords
	ch <- memMaxBytes
}

// Collect implements prometheus.Collector.
func (m *Memory) Collect(ch chan<- prometheus.Metric) {
	maxRecords, maxBytes := m.s.Bounds()
	ch <- prometheus.MustNewConstMetric(memRecords, prometheus.GaugeValue, float64(m.s.Len()))
	ch <- prometheus.MustNewConstMetric(memBytes, prometheus.GaugeValue, float64(m.s.Bytes()))
	ch <- prometheus.MustNewConstMetric(memMaxRecords, prometheus.GaugeValue, float64(maxRecords))
	ch <- prometheus.MustNewConstMetric(memMaxBytes, prometheus.GaugeValue, float64(maxBytes))
}

var (
	lcHits      = prometheus.NewDesc(LocalCacheHits, "Claims the store's local cache of completed records answered, with no round trip.", nil, nil)
	lcMisses    = prometheus.NewDesc(LocalCacheMisses, "Claims the store's local cache could not answer (not held, expired, or the cache not trusted), sent to the store.", nil, nil)
	lcRecords   = prometheus.NewDesc(LocalCacheRecords, "Completed records held by the store's local cache.", nil, nil)
	lcBytes     = prometheus.NewDesc(LocalCacheBytes, "Approximate bytes held by the store's local cache.", nil, nil)
	lcMaxBytes  = prometheus.NewDesc(LocalCacheMaxBytes, "The bound of the store's local cache (redis_local_cache, postgres_local_cache).", nil, nil)
	lcInval     = prometheus.NewDesc(LocalCacheInvalidations, "Records the local cache dropped because a delete or resolve through any instance announced them.", nil, nil)
	lcFlushes   = prometheus.NewDesc(LocalCacheFlushes, "Times the local cache's subscription broke (lost, reconnected), which emptied it.", nil, nil)
	lcUntrusted = prometheus.NewDesc(LocalCacheUntrusted, "Seconds the local cache, while claims kept consulting it, answered nothing because none of its pings had come back within 200ms (a broken or slow subscription).", nil, nil)
)

// LocalCache is the use of a shared store's local cache of completed records
// (idemproxy_local_cache_*), read at each scrape. It is a
// prometheus.Collector; two of them describe the same metrics, so a registry
// takes one (see Register).
type LocalCache struct{ s cache.LocalCacher }

// NewLocalCache returns the metrics of s's local cache, or nil when s keeps
// none (a memory or DynamoDB store, or one with the cache off).
func NewLocalCache(s cache.Store) *LocalCache {
	lc, ok := s.(cache.LocalCacher)
	if !ok {
		return nil
	}
	if _, on := lc.LocalCacheStats(); !on {
		return nil
	}
	return &LocalCache{s: lc}
}

// Describe implements prometheus.Collector.
func (l *LocalCache) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lcHits, lcMisses, lcRecords, lcBytes, lcMaxBytes, lcInval, lcFlushes, lcUntrusted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (l *LocalCache) Collect(ch chan<- prometheus.Metric) {
	st, _ := l.s.LocalCacheStats()
	ch <- prometheus.MustNewConstMetric(lcHits, prometheus.CounterValue, float64(st.Hits))
	ch <- prometheus.MustNewConstMetric(lcMisses, prometheus.CounterValue, float64(st.Misses))
	ch <- prometheus.MustNewConstMetric(lcRecords, prometheus.GaugeValue, float64(st.Records))
	ch <- prometheus.MustNewConstMetric(lcBytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(lcMaxBytes, prometheus.GaugeValue, float64(st.MaxBytes))
	ch <- prometheus.MustNewConstMetric(lcInval, prometheus.CounterValue, float64(st.Invalidations))
	ch <- prometheus.MustNewConstMetric(lcFlushes, prometheus.CounterValue, float64(st.Flushes))
	ch <- prometheus.MustNewConstMetric(lcUntrusted, prometheus.CounterValue, st.Untrusted.Seconds())
}

// Register registers each collector in reg. One whose metrics reg already has
// (the same collector, registered by another handler of the same Caddy config,
// or a second Memory) is left as it is: no error. Any other error is returned,
// and the collectors after it are not registered.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}
