package tracing_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/tracing"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// Server spans from otelhttp carry the outcome, the key hash and whether the
// answer was replayed; a replay, a 409 and a 422 link to the first execution's
// span (kept with the claim while in flight, with the response once done).
func TestSpansAndLinks(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(t.Context())
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.TraceContext = tracing.TraceContext }, func(s *middleware.Settings) { s.Observer = tracing.Observe })
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	h := otelhttp.NewHandler(idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})), "idemproxy", otelhttp.WithTracerProvider(tp))
	send := func(path, key, body string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		h.ServeHTTP(w, r)
		return w.Code
	}
	if send("/pay", "k1", "a") != 201 || send("/pay", "k1", "a") != 201 || send("/pay", "k1", "b") != 422 {
		t.Fatal("unexpected statuses")
	}
	done := make(chan struct{})
	go func() { send("/slow", "k2", "x"); close(done) }()
	<-started
	if code := send("/slow", "k2", "x"); code != 409 {
		t.Fatalf("in flight: %d", code)
	}
	close(release)
	<-done

	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans, want 5", len(spans))
	}
	first, replay, mismatch, conflict, slow := spans[0], spans[1], spans[2], spans[3], spans[4]
	for _, c := range []struct {
		s        sdktrace.ReadOnlySpan
		outcome  string
		replayed bool
		linkTo   sdktrace.ReadOnlySpan
	}{
		{first, "stored", false, nil},
		{replay, "replayed", true, first},
		{mismatch, "mismatch", false, first},
		{conflict, "conflict", false, slow},
		{slow, "stored", false, nil},
	} {
		a := attrs(c.s)
		if a[tracing.AttrOutcome].AsString() != c.outcome || a[tracing.AttrReplayed].AsBool() != c.replayed || len(a[tracing.AttrKeyHash].AsString()) != 12 {
			t.Errorf("%s span: attributes %v", c.outcome, a)
		}
		links := c.s.Links()
		if c.linkTo == nil {
			if len(links) != 0 {
				t.Errorf("%s span: links %v", c.outcome, links)
			}
			continue
		}
		if len(links) != 1 || links[0].SpanContext.SpanID() != c.linkTo.SpanContext().SpanID() ||
			links[0].SpanContext.TraceID() != c.linkTo.SpanContext().TraceID() || links[0].Attributes[0].Value.AsString() != "first_execution" {
			t.Errorf("%s span: links %+v, want one to %s", c.outcome, links, c.linkTo.SpanContext().SpanID())
		}
	}
}

// Without a span (tracing off) nothing is stored and nothing breaks.
func TestNoSpan(t *testing.T) {
	if b := tracing.TraceContext(t.Context()); b != nil {
		t.Fatalf("TraceContext without a span: %x", b)
	}
	if _, ok := tracing.SpanContext([]byte("short")); ok {
		t.Fatal("decoded garbage")
	}
	tracing.Observe(middleware.Event{Request: httptest.NewRequest("POST", "/", nil), Origin: []byte("x")})
}
