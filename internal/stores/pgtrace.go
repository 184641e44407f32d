package stores

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// pgTracer is pgx's query tracer for the PostgreSQL store: a client span per
// statement, named by its first words (the statements are the store's own, so
// their text holds no request data; arguments are never recorded).
type pgTracer struct{ tracer trace.Tracer }

func newPGTracer() *pgTracer {
	return &pgTracer{tracer: otel.Tracer("github.com/idemproxy/idemproxy/cache/pgstore")}
}

func (t *pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	op := statementName(data.SQL)
	ctx, _ = t.tracer.Start(ctx, "postgresql "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql"), attribute.String("db.operation.name", op)))
	return ctx
}

func (t *pgTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span := trace.SpanFromContext(ctx)
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, data.Err.Error())
	}
	span.End()
}

// statementName is the statement's leading keyword (WITH, SELECT, DELETE, …).
func statementName(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "statement"
	}
	return strings.ToUpper(f[0])
}
