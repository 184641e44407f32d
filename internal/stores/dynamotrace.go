package stores

import (
	"context"
	"errors"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// dynamoSpans makes every DynamoDB call of a client a client span of the
// global tracer provider, named as the AWS SDK names its own (DynamoDB.PutItem),
// with the semantic conventions' rpc.* and aws.dynamodb.* attributes. One span
// covers the SDK's retries of the call. A failed condition is how a replay, a
// 409 and a 422 are found, not a fault: it is an event on the span, whose
// status stays unset; other errors set it. No item, key or value is recorded.
//
// (OpenTelemetry's otelaws contrib module would do this, but it is deprecated,
// "no longer supported", and links the S3, SQS, SNS and Route 53 clients into
// the binary.)
func dynamoSpans(table string) func(*dynamodb.Options) {
	tracer := otel.Tracer("github.com/idemproxy/idemproxy/cache/dynamostore")
	mw := middleware.InitializeMiddlewareFunc("idemproxy.OTelSpan", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		op := awsmiddleware.GetOperationName(ctx)
		ctx, span := tracer.Start(ctx, "DynamoDB."+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("rpc.system", "aws-api"),
			attribute.String("rpc.service", "DynamoDB"),
			attribute.String("rpc.method", op),
			attribute.String("db.system.name", "aws.dynamodb"),
			attribute.String("db.operation.name", op),
			attribute.StringSlice("aws.dynamodb.table_names", []string{table}),
		))
		defer span.End()
		out, md, err := next.HandleInitialize(ctx, in)
		if id, ok := awsmiddleware.GetRequestIDMetadata(md); ok {
			span.SetAttributes(attribute.String("aws.request_id", id))
		}
		var ccf *types.ConditionalCheckFailedException
		switch {
		case errors.As(err, &ccf):
			span.AddEvent("condition check failed")
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return out, md, err
	})
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(mw, middleware.Before)
		})
	}
}
