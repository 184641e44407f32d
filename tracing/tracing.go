// Package tracing connects idemproxy's core to OpenTelemetry without the core
// knowing of it: TraceContext is the core's trace-context hook
// (middleware.Settings.TraceContext) and Observe, called from the observer, puts the
// outcome on the request's span and links a duplicate's span to the first
// execution's. It uses the OpenTelemetry API only; the proxy sets up the SDK, and
// inside Caddy the spans are those of Caddy's own tracing directive.
//
//	idem, _ := middleware.New(store,
//		func(s *middleware.Settings) { s.TraceContext = tracing.TraceContext },
//		func(s *middleware.Settings) { s.Observer = tracing.Observe })
package tracing

import (
	"context"

	"github.com/idemproxy/idemproxy/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Attributes set on the request's span.
const (
	AttrOutcome  = attribute.Key("idempotency.outcome")
	AttrKeyHash  = attribute.Key("idempotency.key_hash")
	AttrReplayed = attribute.Key("idempotency.replayed")
	// AttrLink marks the link from a duplicate to the first execution.
	AttrLink = attribute.Key("idempotency.link")
)

// encodedLen is a trace context as TraceContext encodes it: the trace id, the
// span id and the trace flags.
const encodedLen = 16 + 8 + 1

// TraceContext returns the span context of ctx as bytes for the core to keep
// with a claim: nil when ctx carries no valid span context (tracing off, or no
// span), so nothing is stored.
func TraceContext(ctx context.Context) []byte {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	b := make([]byte, 0, encodedLen)
	tid, sid := sc.TraceID(), sc.SpanID()
	b = append(b, tid[:]...)
	b = append(b, sid[:]...)
	return append(b, byte(sc.TraceFlags()))
}

// SpanContext decodes what TraceContext encoded; false for anything else.
func SpanContext(b []byte) (trace.SpanContext, bool) {
	if len(b) != encodedLen {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], b[:16])
	copy(sid[:], b[16:24])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(b[24]), Remote: true})
	return sc, sc.IsValid()
}

// Observe records ev on the span of its request: the outcome, the key's hash,
// whether the answer was replayed, and for a duplicate (a replay, 409 or 422) a
// link to the first execution's span, so "why did this retry get that answer"
// is one click. It does nothing when the request's span is not recording.
func Observe(ev middleware.Event) {
	if ev.Request == nil {
		return
	}
	span := trace.SpanFromContext(ev.Request.Context())
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		AttrOutcome.String(string(ev.Outcome)),
		AttrReplayed.Bool(ev.Outcome == middleware.OutcomeReplayed),
	}
	if ev.KeyHash != "" {
		attrs = append(attrs, AttrKeyHash.String(ev.KeyHash))
	}
	span.SetAttributes(attrs...)
	if sc, ok := SpanContext(ev.Origin); ok && sc.SpanID() != span.SpanContext().SpanID() {
		span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLink.String("first_execution")}})
	}
}
