package proxy_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/tracing/otlptest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// The built binary with OTEL_EXPORTER_OTLP_ENDPOINT exports a server span per
// request (continuing the client's trace), a client span for the upstream call
// whose traceparent reaches the upstream, the idempotency attributes, and a link
// from the replay and the 422 to the first execution's span.
func TestE2ETracingOTLP(t *testing.T) {
	skipShort(t)
	t.Run("http", func(t *testing.T) {
		rc := otlptest.NewReceiver(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
		tracingOTLP(t, rc)
	})
	t.Run("grpc", func(t *testing.T) {
		rc := otlptest.NewGRPCReceiver(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.Endpoint)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
		t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
		tracingOTLP(t, &rc.Receiver)
	})
}

// traceparents is an upstream that answers 201 "created" and records the
// Traceparent of every request.
type traceparents struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newTraceparents(t *testing.T) *traceparents {
	u := &traceparents{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Get("Traceparent"))
		u.mu.Unlock()
		w.WriteHeader(201)
		fmt.Fprint(w, "created")
	}))
	t.Cleanup(u.Close)
	return u
}

// all is every Traceparent seen so far.
func (u *traceparents) all() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func tracingOTLP(t *testing.T, rc *otlptest.Receiver) {
	up := newTraceparents(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "idemproxy-e2e")
	p := start(t, "--upstream", up.URL)

	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	first := p.Post(t, "/pay", "k1", "a", "Traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01")
	again := p.Post(t, "/pay", "k1", "a")
	reuse := p.Post(t, "/pay", "k1", "b")
	if first.Status != 201 || !again.Replayed || reuse.Status != 422 {
		t.Fatalf("first %+v again %+v reuse %+v", first, again, reuse)
	}
	waitLog(t, p, `"trace_id":"`+clientTrace+`"`, 1) // on the request lines
	var server []*tracepb.Span
	var client *tracepb.Span
	testutil.Eventually(t, 15*time.Second, "3 server spans and a client span", func() bool {
		server, client = nil, nil
		for _, s := range rc.Spans() {
			switch s.Kind {
			case tracepb.Span_SPAN_KIND_SERVER:
				server = append(server, s)
			case tracepb.Span_SPAN_KIND_CLIENT:
				client = s
			}
		}
		return len(server) == 3 && client != nil
	})
	byOutcome := map[string]*tracepb.Span{}
	for _, s := range server {
		byOutcome[otlptest.Attr(s, "idempotency.outcome").GetStringValue()] = s
	}
	stored, replayed, mismatch := byOutcome["stored"], byOutcome["replayed"], byOutcome["mismatch"]
	if stored == nil || replayed == nil || mismatch == nil {
		t.Fatalf("server spans by outcome: %v", byOutcome)
	}
	if got := hex.EncodeToString(stored.TraceId); got != clientTrace || hex.EncodeToString(stored.ParentSpanId) != "00f067aa0ba902b7" {
		t.Errorf("the first request's span is in trace %s under %x, want the client's %s", got, stored.ParentSpanId, clientTrace)
	}
	if stored.Name != "POST /" {
		t.Errorf("span name %q", stored.Name)
	}
	for _, s := range server {
		if len(otlptest.Attr(s, "idempotency.key_hash").GetStringValue()) != 12 {
			t.Errorf("%s: key_hash %v", s.Name, otlptest.Attr(s, "idempotency.key_hash"))
		}
	}
	if otlptest.Attr(stored, "idempotency.replayed").GetBoolValue() || !otlptest.Attr(replayed, "idempotency.replayed").GetBoolValue() {
		t.Errorf("idempotency.replayed: stored %v replayed %v", otlptest.Attr(stored, "idempotency.replayed"), otlptest.Attr(replayed, "idempotency.replayed"))
	}
	for name, s := range map[string]*tracepb.Span{"replay": replayed, "422": mismatch} {
		if len(s.Links) != 1 || !bytes.Equal(s.Links[0].SpanId, stored.SpanId) || !bytes.Equal(s.Links[0].TraceId, stored.TraceId) {
			t.Errorf("%s span links %v, want one to the first execution %x", name, s.Links, stored.SpanId)
		}
	}
	if len(stored.Links) != 0 {
		t.Errorf("the first execution links to %v", stored.Links)
	}
	// The upstream call: a client span under the first request's span, whose
	// context went upstream as traceparent.
	if !bytes.Equal(client.ParentSpanId, stored.SpanId) || !bytes.Equal(client.TraceId, stored.TraceId) {
		t.Errorf("client span parent %x trace %x, want %x %x", client.ParentSpanId, client.TraceId, stored.SpanId, stored.TraceId)
	}
	tps := up.all()
	want := "00-" + clientTrace + "-" + hex.EncodeToString(client.SpanId) + "-01"
	if len(tps) != 1 || tps[0] != want {
		t.Errorf("traceparent upstream %q, want [%s]", tps, want)
	}
	if services := strings.Join(rc.Services(), ","); !strings.Contains(services, "idemproxy-e2e") {
		t.Errorf("service names %q", services)
	}
}

// With a shared store, its calls are spans under the request's span: redisotel
// for Redis, pgx's query tracer for PostgreSQL.
func TestE2ETracingStoreSpans(t *testing.T) {
	skipShort(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	defer up.Close()
	for _, store := range []struct {
		name, system string
		url          func() string
	}{
		{"redis", "redis", func() string { return redistest.Start(t).URL() }},
		{"postgres", "postgresql", func() string { return pgtest.Start(t).URL() }},
	} {
		t.Run(store.name, func(t *testing.T) {
			rc := otlptest.NewReceiver(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
			p := start(t, "--upstream", up.URL, "--store", store.url())
			if r := p.Post(t, "/pay", "s1", "a"); r.Status != 201 {
				t.Fatalf("%+v", r)
			}
			var server *tracepb.Span
			var storeSpans []*tracepb.Span
			testutil.Eventually(t, 15*time.Second, "the server span and its store spans", func() bool {
				server, storeSpans = nil, nil
				all := rc.Spans()
				for _, s := range all {
					if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
						server = s
					}
				}
				for _, s := range all {
					sys := otlptest.Attr(s, "db.system").GetStringValue() + otlptest.Attr(s, "db.system.name").GetStringValue()
					if server != nil && sys == store.system && bytes.Equal(s.TraceId, server.TraceId) {
						storeSpans = append(storeSpans, s)
					}
				}
				return server != nil && len(storeSpans) >= 2 // the claim, and the completion
			})
			for _, s := range storeSpans {
				if s.Kind != tracepb.Span_SPAN_KIND_CLIENT {
					t.Errorf("store span %q is %v, want a client span", s.Name, s.Kind)
				}
			}
		})
	}
}

// Spans still batched at shutdown are exported before the process exits; the
// sampler is the SDK's, set by OTEL_TRACES_SAMPLER; and with no endpoint there is
// no tracing at all (nothing is added to what goes upstream).
func TestE2ETracingShutdownSamplerAndOff(t *testing.T) {
	skipShort(t)
	up := newTraceparents(t)
	lastTP := func() string { all := up.all(); return all[len(all)-1] }
	serverSpans := func(rc *otlptest.Receiver) int {
		n := 0
		for _, s := range rc.Spans() {
			if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				n++
			}
		}
		return n
	}

	t.Run("flushed at shutdown", func(t *testing.T) {
		rc := otlptest.NewReceiver(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
		t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000") // only the shutdown exports
		p := start(t, "--upstream", up.URL)
		p.Post(t, "/pay", "f1", "a")
		p.Stop(t)
		if n := serverSpans(rc); n != 1 {
			t.Fatalf("%d server spans exported by the time the process exited, want 1", n)
		}
	})
	t.Run("sampler from OTEL_TRACES_SAMPLER", func(t *testing.T) {
		rc := otlptest.NewReceiver(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
		t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
		p := start(t, "--upstream", up.URL)
		p.Post(t, "/pay", "s1", "a")
		p.Stop(t)
		if n := len(rc.Spans()); n != 0 {
			t.Fatalf("always_off exported %d spans", n)
		}
		if tp := lastTP(); !strings.HasPrefix(tp, "00-") || !strings.HasSuffix(tp, "-00") {
			t.Fatalf("traceparent upstream %q, want one that says not sampled", tp)
		}
	})
	t.Run("off without an endpoint", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		p := start(t, "--upstream", up.URL)
		p.Post(t, "/pay", "o1", "a")
		if tp := lastTP(); tp != "" {
			t.Fatalf("traceparent %q sent upstream with tracing off", tp)
		}
		if strings.Contains(p.Logs.String(), "tracing on") {
			t.Fatal("tracing on without an endpoint")
		}
	})
}
