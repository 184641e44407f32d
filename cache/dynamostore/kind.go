package dynamostore

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

	"github.com/idemproxy/idemproxy/cache"
)

// Driver describes the DynamoDB store to the programs that open stores from
// configuration (idemproxy, the Caddy module, idemproxy migrate). Its URL,
// dynamodb://TABLE, selects it and names the table; region, credentials and
// endpoint come from the standard AWS chain (Open). Open gives
// cache.Env.Instrument the *Options of the store before it builds the
// client, to add to their ClientOptions.
var Driver = cache.Driver{
	Name:     "dynamodb",
	Title:    "DynamoDB",
	Schemes:  []string{"dynamodb"},
	Locator:  "table",
	Help:     "dynamodb://TABLE (region, credentials and endpoint from the AWS environment: AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB, instance roles; see docs/stores.md#dynamodb)",
	Settings: func() cache.Settings { s := DefaultSettings(); return &s },
}

// Settings are the DynamoDB store's settings from configuration: shared by
// every instance pointing at the same table.
type Settings struct {
	// Create the DynamoDB table (on-demand billing, time to live on 'ttl') at
	// start-up when missing; 'false': a missing table stops start-up with one
	// line ('idemproxy migrate --store dynamodb://TABLE' prints or applies its
	// definition).
	//
	// Default: true.
	CreateTable bool `json:"create_table"`

	// Largest encoded response kept in the record item, at most '300KiB'; a
	// larger one goes to chunk items, read with one more request. Every replay,
	// 409 and 422 is a failed write charged 1 write unit per KB of the record
	// item it finds, so that a small limit keeps them cheap (see
	// docs/stores.md#dynamodb).
	//
	// Default: 4KiB.
	InlineLimit int64 `json:"inline_limit" unit:"bytes"`

	// Largest encoded response (body, headers, trailers) the DynamoDB store
	// keeps, at most '256MiB'; a larger one is remembered as done, not
	// replayable (retries get '409'). Keep it above max_body.
	//
	// Default: 16MiB.
	MaxResponse int64 `json:"max_response" unit:"bytes"`
}

// DefaultSettings are the DynamoDB store's defaults.
func DefaultSettings() Settings {
	return Settings{CreateTable: true, InlineLimit: DefaultInlineLimit, MaxResponse: DefaultMaxResponse}
}

// createWait bounds the creation of a missing table by Open (DynamoDB takes
// seconds to a minute to make a new table active).
const createWait = 2 * time.Minute

// Check implements cache.Settings.
func (d *Settings) Check() error {
	if d.InlineLimit < 1 || d.InlineLimit > MaxInlineLimit {
		return cache.FieldErrorf(Driver.Name, "inline_limit", "must be between 1B and %s, got %s", sizeText(MaxInlineLimit), sizeText(d.InlineLimit))
	}
	if d.MaxResponse < 1 || d.MaxResponse > MaxMaxResponse {
		return cache.FieldErrorf(Driver.Name, "max_response", "must be between 1B and %s, got %s", sizeText(MaxMaxResponse), sizeText(d.MaxResponse))
	}
	return nil
}

// sizeText writes a size as the settings take it: 300KiB, 1024B.
func sizeText(n int64) string {
	switch {
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Validate implements cache.Settings: d, and the table the URL names.
func (d *Settings) Validate(rawURL string) error {
	if err := d.Check(); err != nil {
		return err
	}
	_, err := ParseURL(rawURL)
	return err
}

// ParseURL returns the table a dynamodb://TABLE URL names.
func ParseURL(rawURL string) (table string, err error) {
	scheme, table, ok := strings.Cut(rawURL, "://")
	if !ok || !strings.EqualFold(scheme, "dynamodb") {
		return "", fmt.Errorf("%q: want dynamodb://TABLE", cache.RedactURL(rawURL))
	}
	if err := CheckTable(table); err != nil {
		return "", fmt.Errorf("%q: want dynamodb://TABLE, with nothing after the table (region, credentials and endpoint come from the AWS environment: AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB): %w", cache.RedactURL(rawURL), err)
	}
	return table, nil
}

// Open implements cache.Settings: a client from the standard AWS
// configuration, a check that DynamoDB answers within cache.PingTimeout, and
// the table (created when missing and d.CreateTable, else checked). A
// DynamoDB that does not answer is a *cache.UnreachableError;
// env.StartUnreachable is not supported (the table must be checked before
// the store is of any use). env.StoreTimeout bounds each request.
func (d *Settings) Open(ctx context.Context, rawURL string, env cache.Env) (cache.Store, func() error, error) {
	s, err := d.open(ctx, rawURL, env)
	if err != nil {
		return nil, nil, err
	}
	env.Note("idempotency: no local cache of completed records with DynamoDB: a table announces no changes, so a delete or resolve could not reach every instance's cache; every replay is a read of the table")
	return s, s.Close, nil
}

func (d *Settings) open(ctx context.Context, rawURL string, env cache.Env) (*Store, error) {
	if err := d.Validate(rawURL); err != nil {
		return nil, err
	}
	table, _ := ParseURL(rawURL)
	opts := d.options(env)
	if env.Instrument != nil {
		if err := env.Instrument(&opts); err != nil {
			return nil, fmt.Errorf("tracing DynamoDB: %w", err)
		}
	}
	client, err := NewClient(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rawURL, err)
	}
	if err := reachable(ctx, client, rawURL, table); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, createWait)
	defer cancel()
	return New(cctx, client, table, opts)
}

// options are the store's options from d and env.
func (d *Settings) options(env cache.Env) Options {
	return Options{
		CreateTable: d.CreateTable,
		InlineLimit: int(d.InlineLimit),
		MaxResponse: int(d.MaxResponse),
		// store_timeout bounds each request, so that a large response's
		// chunks, written at the pace the table takes them, are not bounded
		// as a whole (the core gives Complete no overall deadline).
		RequestTimeout: env.StoreTimeout,
		Warn:           env.Warn,
		// The SDK's own warnings go to env.Warn, not to stderr in its format.
		ClientOptions: []func(*dynamodb.Options){func(o *dynamodb.Options) { o.Logger = sdkLogger{warn: env.Warning} }},
	}
}

// Schema implements cache.SchemaSettings: the AWS CLI commands that create
// the table the URL names (Schema).
func (d *Settings) Schema(rawURL string) (string, error) {
	table, err := ParseURL(rawURL)
	if err != nil {
		return "", err
	}
	return Schema(table)
}

// Migrate implements cache.SchemaSettings: it creates the table when it is
// missing (on-demand, time to live on), waits until it is active and checks
// its key schema.
func (d *Settings) Migrate(ctx context.Context, rawURL string, env cache.Env) (string, error) {
	create := *d
	create.CreateTable = true
	s, err := create.open(ctx, rawURL, env)
	if err != nil {
		return "", err
	}
	return "table " + s.Table(), s.Close()
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

// reachable reads the table's description within cache.PingTimeout: any
// answer from DynamoDB, a missing table included, is an answer; a request
// that could not be sent (no route, refused, no reply in time) is a
// *cache.UnreachableError.
func reachable(ctx context.Context, client *dynamodb.Client, rawURL, table string) error {
	pctx, cancel := context.WithTimeout(ctx, cache.PingTimeout)
	defer cancel()
	_, err := client.DescribeTable(pctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	var api smithy.APIError
	var send *smithyhttp.RequestSendError
	switch {
	case err == nil, errors.As(err, &api):
		return nil // New says what a refusal means
	case errors.As(err, &send), pctx.Err() != nil:
		return &cache.UnreachableError{Store: Driver.Title, URL: rawURL, Err: err}
	default: // no credentials, or a bad endpoint setting
		return fmt.Errorf("%s: DynamoDB: %s", rawURL, strings.Join(strings.Fields(err.Error()), " "))
	}
}

var _ cache.SchemaSettings = (*Settings)(nil)
