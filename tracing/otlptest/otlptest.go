// Package otlptest is an OTLP trace receiver for tests, over HTTP or gRPC: the
// built binaries export their spans to it as they would to a collector.
package otlptest

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiver keeps every span exported to it (POST /v1/traces, protobuf, gzip or
// not). Point OTEL_EXPORTER_OTLP_ENDPOINT at its URL.
type Receiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

// NewReceiver starts a receiver, closed when the test ends.
func NewReceiver(t testing.TB) *Receiver {
	rc := &Receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.add(&req)
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (rc *Receiver) add(req *coltrace.ExportTraceServiceRequest) {
	rc.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				rc.services = append(rc.services, kv.Value.GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			rc.spans = append(rc.spans, ss.Spans...)
		}
	}
	rc.mu.Unlock()
}

// GRPCReceiver is a Receiver that takes OTLP over gRPC: point
// OTEL_EXPORTER_OTLP_ENDPOINT at Endpoint, with OTEL_EXPORTER_OTLP_PROTOCOL=grpc
// and OTEL_EXPORTER_OTLP_INSECURE=true.
type GRPCReceiver struct {
	Receiver
	Endpoint string // http://127.0.0.1:port
	coltrace.UnimplementedTraceServiceServer
}

// NewGRPCReceiver starts a gRPC receiver, stopped when the test ends.
func NewGRPCReceiver(t testing.TB) *GRPCReceiver {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &GRPCReceiver{Endpoint: "http://" + l.Addr().String()}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, rc)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return rc
}

// Export implements the OTLP trace service.
func (rc *GRPCReceiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	rc.add(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (rc *Receiver) Spans() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...)
}

// Services returns the service.name of every batch received.
func (rc *Receiver) Services() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.services...)
}

// Attr returns the span's attribute key, or nil.
func Attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}
