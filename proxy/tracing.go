package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingWanted reports whether the standard OpenTelemetry variables ask for
// traces: an OTLP endpoint is set (for traces, or for every signal), the SDK is
// not disabled, and the traces exporter is not "none". Tracing is off otherwise,
// and then costs nothing: no handler, transport or store is wrapped.
func tracingWanted(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// startTracing installs the global tracer provider and propagator as the OTEL_*
// variables describe them: the exporter (OTLP over HTTP, or gRPC with
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc), the sampler (OTEL_TRACES_SAMPLER; parent-
// based always-on by default), the resource (OTEL_SERVICE_NAME, default
// idemproxy; OTEL_RESOURCE_ATTRIBUTES) and the propagators (OTEL_PROPAGATORS;
// W3C trace context and baggage by default). It returns the function that
// flushes and stops it.
func startTracing(ctx context.Context) (func(context.Context) error, error) {
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing (OTEL_* variables): %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "idemproxy"), attribute.String("service.version", Version)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	if fromEnv, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, fromEnv); err == nil {
			res = merged // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(autoprop.NewTextMapPropagator())
	return tp.Shutdown, nil
}

// traced wraps the proxy's handler in server spans named by method and route
// (the route's path prefix: few names, whatever the paths).
func (p *Proxy) traced() http.Handler {
	return otelhttp.NewHandler(p, "idemproxy", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		route := p.cur.Load().routeOf(r).path
		if route == "" {
			route = "/"
		}
		return r.Method + " " + route
	}))
}
