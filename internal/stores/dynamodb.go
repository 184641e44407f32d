package stores

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/internal/conf"
)

// DynamoDB is the DynamoDB store's settings. Its URL, dynamodb://TABLE, selects
// it and names the table; region, credentials and endpoint come from the
// standard AWS chain (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB, the
// shared config files, instance and container roles). Shared by every
// instance pointing at the same table.
type DynamoDB struct {
	CreateTable bool  `json:"create_table" go:"'dynamostore.Options.CreateTable'" help:"create the DynamoDB table (on-demand billing, time to live on 'ttl') at start-up when missing; 'false': a missing table stops start-up with one line ('idemproxy migrate --store dynamodb://TABLE' prints or applies its definition)"`
	InlineLimit int64 `json:"inline_limit" unit:"bytes" go:"'dynamostore.Options.InlineLimit'" help:"largest encoded response kept in the record item, at most '300KiB'; a larger one goes to chunk items, read with one more request. Every replay, 409 and 422 is a failed write charged 1 write unit per KB of the record item it finds, so that a small limit keeps them cheap (see docs/stores.md#dynamodb)"`
	MaxResponse int64 `json:"max_response" unit:"bytes" go:"'dynamostore.Options.MaxResponse'" help:"largest encoded response (body, headers, trailers) the DynamoDB store keeps, at most '256MiB'; a larger one is remembered as done, not replayable (retries get '409'). Keep it above max_body"`
}

// DefaultDynamoDB is the DynamoDB store's defaults.
func DefaultDynamoDB() DynamoDB {
	return DynamoDB{CreateTable: true, InlineLimit: dynamostore.DefaultInlineLimit, MaxResponse: dynamostore.DefaultMaxResponse}
}

// dynamoCreateWait bounds the creation of a missing table at start-up
// (DynamoDB takes seconds to a minute to make a new table active).
const dynamoCreateWait = 2 * time.Minute

// Check checks d's settings, without a URL.
func (d DynamoDB) Check() error {
	if d.InlineLimit < 1 || d.InlineLimit > dynamostore.MaxInlineLimit {
		return fieldErr("dynamodb", "inline_limit", "must be between 1B and %s, got %s",
			conf.FormatSize(dynamostore.MaxInlineLimit), conf.FormatSize(d.InlineLimit))
	}
	if d.MaxResponse < 1 || d.MaxResponse > dynamostore.MaxMaxResponse {
		return fieldErr("dynamodb", "max_response", "must be between 1B and %s, got %s",
			conf.FormatSize(dynamostore.MaxMaxResponse), conf.FormatSize(d.MaxResponse))
	}
	return nil
}

// Validate checks d and the URL (parsed only; nothing is sent).
func (d DynamoDB) Validate(rawURL string) error {
	if err := d.Check(); err != nil {
		return err
	}
	_, err := DynamoDBTable(rawURL)
	return err
}

// DynamoDBTable is the table a dynamodb://TABLE URL names.
func DynamoDBTable(rawURL string) (string, error) {
	scheme, table, ok := strings.Cut(rawURL, "://")
	if !ok || !strings.EqualFold(scheme, "dynamodb") {
		return "", fmt.Errorf("%q: want dynamodb://TABLE", Redact(rawURL))
	}
	if err := dynamostore.CheckTable(table); err != nil {
		return "", fmt.Errorf("%q: want dynamodb://TABLE, with nothing after the table (region, credentials and endpoint come from the AWS environment: AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB): %w", Redact(rawURL), err)
	}
	return table, nil
}

// Open opens the DynamoDB store at the URL: a client from the standard AWS
// configuration, a check that DynamoDB answers within PingTimeout, and the
// table (created when missing and CreateTable, else checked), with the
// function that closes the store. A DynamoDB that does not answer is an
// *UnreachableError; env.StartUnreachable is not supported (the table must
// be checked before the store is of any use).
func (d DynamoDB) Open(ctx context.Context, rawURL string, env Env) (*dynamostore.Store, func() error, error) {
	if err := d.Validate(rawURL); err != nil {
		return nil, nil, err
	}
	table, _ := DynamoDBTable(rawURL)
	opts := d.options(table, env)
	client, err := dynamostore.NewClient(ctx, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", rawURL, err)
	}
	if err := dynamoReachable(ctx, client, rawURL, table); err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, dynamoCreateWait)
	defer cancel()
	s, err := dynamostore.New(cctx, client, table, opts)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// options are the store's options from d and env.
func (d DynamoDB) options(table string, env Env) dynamostore.Options {
	opts := dynamostore.Options{
		CreateTable: d.CreateTable,
		InlineLimit: int(d.InlineLimit),
		MaxResponse: int(d.MaxResponse),
		// store_timeout bounds each request, so that a large response's
		// chunks, written at the pace the table takes them, are not bounded
		// as a whole (the core gives Complete no overall deadline).
		RequestTimeout: env.StoreTimeout,
		Warn:           env.Warn,
		// The SDK's own warnings go to env.Warn, not to stderr in its format.
		ClientOptions: []func(*dynamodb.Options){func(o *dynamodb.Options) { o.Logger = sdkLogger{warn: env.warn} }},
	}
	if env.Trace {
		opts.ClientOptions = append(opts.ClientOptions, traceDynamoDB(table))
	}
	return opts
}

// sdkLogger passes the AWS SDK's warnings (a response body it could not close,
// a clock skew it corrected) to Env.Warn, with the operation; it drops its
// debug lines, which it writes only when asked to (ClientLogMode).
type sdkLogger struct {
	warn func(msg string, args ...any)
	op   string
}

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	// DynamoDB Local sends no X-Amz-Crc32 with its error responses (a failed
	// condition: every replay, 409 and 422), and the SDK then checks the body,
	// read in full and decoded, against 0. DynamoDB itself always sends one.
	if c != logging.Warn || strings.Contains(msg, "did not match expected checksum, 0,") {
		return
	}
	l.warn("dynamodb: AWS SDK: "+msg, "operation", l.op)
}

// WithContext implements logging.ContextLogger: the operation, for the message.
func (l sdkLogger) WithContext(ctx context.Context) logging.Logger {
	l.op = awsmiddleware.GetOperationName(ctx)
	return l
}

// dynamoReachable reads the table's description within PingTimeout: any
// answer from DynamoDB, a missing table included, is an answer; a request
// that could not be sent (no route, refused, no reply in time) is an
// *UnreachableError.
func dynamoReachable(ctx context.Context, client *dynamodb.Client, rawURL, table string) error {
	pctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	_, err := client.DescribeTable(pctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	var api smithy.APIError
	var send *smithyhttp.RequestSendError
	switch {
	case err == nil, errors.As(err, &api):
		return nil // dynamostore.New says what a refusal means
	case errors.As(err, &send), pctx.Err() != nil:
		return &UnreachableError{Store: "DynamoDB", URL: rawURL, Err: err}
	default: // no credentials, or a bad endpoint setting
		return fmt.Errorf("%s: DynamoDB: %s", rawURL, strings.Join(strings.Fields(err.Error()), " "))
	}
}
