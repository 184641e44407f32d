package proxy

import (
	"net/http"

	"github.com/idemproxy/idemproxy/cache/memstore"
	imetrics "github.com/idemproxy/idemproxy/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the proxy's Prometheus metrics: package internal/metrics, with the
// names the Caddy module exports too (every idemproxy_ family is on the
// dashboard in examples/grafana), and the Go runtime's and the process's
// standard ones (go_*, process_*), in a registry of the proxy's own.
type metrics struct {
	reg       *prometheus.Registry
	requests  *imetrics.Requests
	upstream  *imetrics.Upstream
	settled   *imetrics.Settled
	reconcile *imetrics.Reconcile
	handler   http.Handler // /metrics
	mem       prometheus.Collector
}

func newMetrics() *metrics {
	m := &metrics{
		reg:       prometheus.NewPedanticRegistry(),
		requests:  imetrics.NewRequests(),
		upstream:  imetrics.NewUpstream(),
		settled:   imetrics.NewSettled(),
		reconcile: imetrics.NewReconcile(),
	}
	m.reg.MustRegister(m.requests, m.upstream, m.settled, m.reconcile, // a fresh registry: no clash
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// memory serves the gauges (idemproxy_memory_*) of the memory store s, in
// place of the store's a reload replaced; s is nil for the other stores.
func (m *metrics) memory(s *memstore.Store) {
	if m.mem != nil {
		m.reg.Unregister(m.mem)
		m.mem = nil
	}
	if s != nil {
		m.mem = imetrics.NewMemory(s)
		m.reg.MustRegister(m.mem)
	}
}
