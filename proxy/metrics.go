package proxy

import (
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

// metrics are counted with atomics and written in the Prometheus text format; the
// proxy needs no metrics library.
type metrics struct {
	outcomes         map[middleware.Outcome]*atomic.Int64
	untracked        atomic.Int64
	released         atomic.Int64 // unknown outcomes released by an operator
	resolved         atomic.Int64 // unknown outcomes resolved by an operator
	upstreamInFlight atomic.Int64
	store            *histogram
	upstream         *histogram
	mem              *memstore.Store // nil unless the memory store is used
}

func newMetrics() *metrics {
	m := &metrics{
		outcomes: make(map[middleware.Outcome]*atomic.Int64),
		store:    newHistogram(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
		upstream: newHistogram(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
	}
	for _, o := range middleware.Outcomes {
		m.outcomes[o] = new(atomic.Int64)
	}
	return m
}

func (m *metrics) record(ev middleware.Event) {
	if c := m.outcomes[ev.Outcome]; c != nil {
		c.Add(1)
	}
	if ev.StoreDuration > 0 {
		m.store.observe(ev.StoreDuration)
	}
}

func (m *metrics) write(w io.Writer) {
	fmt.Fprint(w, "# HELP idemproxy_requests_total Requests by outcome; untracked ones (other methods, disabled routes) went straight to the upstream.\n# TYPE idemproxy_requests_total counter\n")
	for _, o := range middleware.Outcomes {
		fmt.Fprintf(w, "idemproxy_requests_total{outcome=%q} %d\n", o, m.outcomes[o].Load())
	}
	fmt.Fprintf(w, "idemproxy_requests_total{outcome=\"untracked\"} %d\n", m.untracked.Load())
	fmt.Fprint(w, "# HELP idemproxy_unknown_released_total Unknown outcomes released by an operator (admin API or idemproxy keys release).\n# TYPE idemproxy_unknown_released_total counter\n")
	fmt.Fprintf(w, "idemproxy_unknown_released_total %d\n", m.released.Load())
	fmt.Fprint(w, "# HELP idemproxy_unknown_resolved_total Unknown outcomes resolved by an operator with a response to replay (admin API or idemproxy keys resolve).\n# TYPE idemproxy_unknown_resolved_total counter\n")
	fmt.Fprintf(w, "idemproxy_unknown_resolved_total %d\n", m.resolved.Load())
	fmt.Fprint(w, "# HELP idemproxy_upstream_in_flight First executions currently running upstream.\n# TYPE idemproxy_upstream_in_flight gauge\n")
	fmt.Fprintf(w, "idemproxy_upstream_in_flight %d\n", m.upstreamInFlight.Load())
	if m.mem != nil {
		fmt.Fprint(w, "# HELP idemproxy_memory_records Records held by the memory store.\n# TYPE idemproxy_memory_records gauge\n")
		fmt.Fprintf(w, "idemproxy_memory_records %d\n", m.mem.Len())
		fmt.Fprint(w, "# HELP idemproxy_memory_bytes Approximate bytes held by the memory store's records.\n# TYPE idemproxy_memory_bytes gauge\n")
		fmt.Fprintf(w, "idemproxy_memory_bytes %d\n", m.mem.Bytes())
		maxRecords, maxBytes := m.mem.Bounds()
		fmt.Fprint(w, "# HELP idemproxy_memory_max_records The memory store's bound on records (memory_max_records).\n# TYPE idemproxy_memory_max_records gauge\n")
		fmt.Fprintf(w, "idemproxy_memory_max_records %d\n", maxRecords)
		fmt.Fprint(w, "# HELP idemproxy_memory_max_bytes The memory store's bound on bytes (memory_max_bytes).\n# TYPE idemproxy_memory_max_bytes gauge\n")
		fmt.Fprintf(w, "idemproxy_memory_max_bytes %d\n", maxBytes)
	}
	m.store.write(w, "idemproxy_store_duration_seconds", "Latency of the store's claim-or-get call.")
	m.upstream.write(w, "idemproxy_upstream_duration_seconds", "Latency of first executions forwarded upstream.")
}

type histogram struct {
	bounds []float64
	counts []atomic.Int64 // per bucket, not cumulative; last is +Inf
	sumNs  atomic.Int64
}

func newHistogram(bounds ...float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Int64, len(bounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(h.bounds) && s > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

func (h *histogram) write(w io.Writer, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum int64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{le=\"%s\"} %d\n", name, strconv.FormatFloat(b, 'g', -1, 64), cum)
	}
	cum += h.counts[len(h.bounds)].Load()
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n", name, cum)
	fmt.Fprintf(w, "%s_sum %s\n", name, strconv.FormatFloat(time.Duration(h.sumNs.Load()).Seconds(), 'g', -1, 64))
	fmt.Fprintf(w, "%s_count %d\n", name, cum)
}
