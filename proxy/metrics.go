package proxy

import (
	"net/http"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the proxy's Prometheus metrics: package prommetrics, with the
// names the Caddy module exports too (every idemproxy_ family is on the
// dashboard in examples/grafana), and the Go runtime's and the process's
// standard ones (go_*, process_*), in a registry of the proxy's own.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prommetrics.Requests
	upstream  *prommetrics.Upstream
	settled   *prommetrics.Settled
	reconcile *prommetrics.Reconcile
	handler   http.Handler // /metrics
	mem       prometheus.Collector
	local     prometheus.Collector
}

func newMetrics() *metrics {
	m := &metrics{
		reg:       prometheus.NewPedanticRegistry(),
		requests:  prommetrics.NewRequests(),
		upstream:  prommetrics.NewUpstream(),
		settled:   prommetrics.NewSettled(),
		reconcile: prommetrics.NewReconcile(),
	}
	m.reg.MustRegister(m.requests, m.upstream, m.settled, m.reconcile, // a fresh registry: no clash
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// memory serves the gauges (idemproxy_memory_*) of the store s when it is the
// memory store (imetrics.MemoryStats), and its local cache's
// (idemproxy_local_cache_*) when it has one, in place of the store's a reload
// replaced.
func (m *metrics) memory(s cache.Store) {
	if m.mem != nil {
		m.reg.Unregister(m.mem)
		m.mem = nil
	}
	if mem, ok := s.(prommetrics.MemoryStats); ok {
		m.mem = prommetrics.NewMemory(mem)
		m.reg.MustRegister(m.mem)
	}
	if m.local != nil {
		m.reg.Unregister(m.local)
		m.local = nil
	}
	if lc := prommetrics.NewLocalCache(s); lc != nil {
		m.local = lc
		m.reg.MustRegister(m.local)
	}
}
