// Package metrics is idemproxy's Prometheus metrics, one set for the proxy and
// the Caddy module: the same names, labels, help and buckets on both, so one
// Grafana dashboard (examples/grafana) and one alert file (examples/prometheus)
// serve either. The counts come from the core's observer (middleware.Event); the
// core itself imports no metrics library.
//
// Both surfaces export Requests (idemproxy_requests_total by outcome and the
// claim latency idemproxy_store_duration_seconds) and, with the memory store,
// Memory (idemproxy_memory_*). Only the proxy exports Upstream (its first
// executions' latency and how many run), Settled (held unknown outcomes an
// operator released or resolved through its admin API) and Reconcile (the
// reconcile requests it sent upstream, and what became of each job): under
// Caddy the rest of the route is not one upstream call, there is no admin API
// for keys, and no reconcile.
package metrics

import (
	"errors"
	"time"

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
)

// ProxyOnly are the metrics whose meaning exists in the proxy alone (see the
// package doc): the Caddy module does not export them.
var ProxyOnly = []string{UpstreamDuration, UpstreamInFlight, UnknownReleased, UnknownResolved, ReconcileAttempts, ReconcileOutcomes}

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

// Observe counts one tracked request under route "": pass it to
// middleware.WithObserver (or call it from the observer given there).
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
