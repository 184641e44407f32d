package stores_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

// dynamodb://TABLE selects the DynamoDB store; anything but a table name after
// the scheme, and settings out of range, are refused by name before anything is
// sent.
func TestDynamoDBValidate(t *testing.T) {
	if kind, err := stores.KindOf("DynamoDB://idem"); err != nil || kind != "dynamodb" {
		t.Fatalf("KindOf: %q, %v", kind, err)
	}
	if _, err := stores.KindOf("dynamo://idem"); err == nil || !strings.Contains(err.Error(), "dynamodb://") {
		t.Fatalf("an unknown scheme: %v; want the list to name dynamodb://", err)
	}
	s := stores.DefaultSettings()
	for _, ok := range []string{"dynamodb://idem", "dynamodb://Idem_records.v-2"} {
		if err := s.Validate(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for url, want := range map[string]string{
		"dynamodb://":                    "want dynamodb://TABLE",
		"dynamodb://ab":                  "3 to 255",
		"dynamodb://idem/records":        "nothing after the table",
		"dynamodb://idem?region=eu-west": "AWS_REGION",
		"dynamodb://user:pw@idem":        "want dynamodb://TABLE",
	} {
		err := s.Validate(url)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line with %q", url, err, want)
		}
	}
	for _, c := range []struct {
		set   func(*dynamostore.Settings)
		field string
	}{
		{func(d *dynamostore.Settings) { d.InlineLimit = 0 }, "inline_limit"},
		{func(d *dynamostore.Settings) { d.InlineLimit = dynamostore.MaxInlineLimit + 1 }, "inline_limit"},
		{func(d *dynamostore.Settings) { d.MaxResponse = 0 }, "max_response"},
		{func(d *dynamostore.Settings) { d.MaxResponse = dynamostore.MaxMaxResponse + 1 }, "max_response"},
	} {
		s := stores.DefaultSettings()
		c.set(s.Of("dynamodb").(*dynamostore.Settings))
		var fe *cache.FieldError
		if err := s.Validate("dynamodb://idem"); !errors.As(err, &fe) || fe.Store != "dynamodb" || fe.Field != c.field {
			t.Errorf("%s: %v; want a FieldError on dynamodb %s", c.field, err, c.field)
		}
	}
	d := dynamostore.DefaultSettings()
	d.InlineLimit, d.MaxResponse = dynamostore.MaxInlineLimit, dynamostore.MaxMaxResponse
	if err := d.Check(); err != nil {
		t.Errorf("the limits themselves: %v", err)
	}
}

// Opened through the AWS environment (AWS_ENDPOINT_URL_DYNAMODB and the rest):
// the table is created when missing, with its time to live, and the store
// works; with creation off a missing table is one line naming idemproxy
// migrate; a DynamoDB that does not answer is an UnreachableError.
func TestDynamoDBOpen(t *testing.T) {
	srv := dynamotest.Start(t)
	srv.Env(t)
	ctx := context.Background()
	s := stores.DefaultSettings()
	var warned []string
	env := stores.Env{Warn: func(msg string, args ...any) { warned = append(warned, msg) }}

	o, err := s.Open(ctx, "dynamodb://open_created", env)
	if err != nil {
		t.Fatalf("open with creation on: %v", err)
	}
	defer o.Close()
	if err := o.Store.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if _, held, err := o.Store.ClaimOrGet(ctx, "k", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil || held {
		t.Fatalf("claim: held %v, %v", held, err)
	}
	ttl, err := srv.Client().DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String("open_created")})
	if err != nil || ttl.TimeToLiveDescription == nil || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "ttl" {
		t.Fatalf("the created table's time to live: %+v, %v", ttl, err)
	}
	if len(warned) != 0 {
		t.Fatalf("warnings on a table it created: %q", warned)
	}
	// Its requests are bounded by the store_timeout it was opened with: a
	// reload to another opens it again.
	if key := s.Key("dynamodb://open_created"); !o.Serves(key, env) || o.Serves(key, stores.Env{StoreTimeout: time.Second}) {
		t.Fatal("Serves: want the same store_timeout only")
	}

	// A table made without its time to live: opened, with a warning.
	def, _ := dynamostore.TableDefinition("open_nottl")
	if _, err := srv.Client().CreateTable(ctx, def.Create); err != nil {
		t.Fatal(err)
	}
	o2, err := s.Open(ctx, "dynamodb://open_nottl", env)
	if err != nil {
		t.Fatalf("open a table without time to live: %v", err)
	}
	o2.Close()
	if len(warned) != 1 || !strings.Contains(warned[0], "time to live is off") {
		t.Fatalf("warnings: %q; want one on the time to live", warned)
	}

	s.Of("dynamodb").(*dynamostore.Settings).CreateTable = false
	_, err = s.Open(ctx, "dynamodb://open_missing", env)
	if err == nil || !strings.Contains(err.Error(), "idemproxy migrate") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("missing table, creation off: %v", err)
	}
	if _, err := srv.Client().DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("open_missing")}); err == nil {
		t.Fatal("the table was created with creation off")
	}

	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://"+testutil.FreeAddr(t)) // nothing listens
	began := time.Now()
	_, err = s.Open(ctx, "dynamodb://open_created", env)
	var unreachable *cache.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Store != "DynamoDB" || strings.Contains(err.Error(), "\n") {
		t.Fatalf("unreachable: %v; want a one-line UnreachableError", err)
	}
	if d := time.Since(began); d > cache.PingTimeout+2*time.Second {
		t.Fatalf("unreachable took %v", d)
	}
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	if _, err := s.Open(ctx, "dynamodb://open_created", env); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Fatalf("no region: %v", err)
	}
}

// With Env.Trace every DynamoDB request is a client span of the global tracer
// provider; a failed condition (a replay found) is an event, not an error.
func TestDynamoDBTrace(t *testing.T) {
	srv := dynamotest.Start(t)
	srv.Env(t)
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	ctx := context.Background()
	s := stores.DefaultSettings()
	o, err := s.Open(ctx, "dynamodb://traced", stores.Env{Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	lock := cache.Claim{Token: "t1", Fingerprint: "f", Duration: time.Minute}
	if _, _, err := o.Store.ClaimOrGet(ctx, "k", lock); err != nil {
		t.Fatal(err)
	}
	lock.Token = "t2"
	if _, held, err := o.Store.ClaimOrGet(ctx, "k", lock); err != nil || !held {
		t.Fatalf("second claim: held %v, %v", held, err)
	}
	var puts []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "DynamoDB.PutItem" {
			puts = append(puts, s)
		}
	}
	if len(puts) != 2 {
		t.Fatalf("PutItem spans: %d, want 2 (of %d spans)", len(puts), len(rec.Ended()))
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range puts[0].Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["db.system.name"].AsString() != "aws.dynamodb" || attrs["rpc.method"].AsString() != "PutItem" ||
		strings.Join(attrs["aws.dynamodb.table_names"].AsStringSlice(), ",") != "traced" {
		t.Fatalf("attributes: %v", puts[0].Attributes())
	}
	failed := puts[1]
	if failed.Status().Code == codes.Error || len(failed.Events()) != 1 || failed.Events()[0].Name != "condition check failed" {
		t.Fatalf("the claim that found a record: status %v, events %v", failed.Status(), failed.Events())
	}
}
