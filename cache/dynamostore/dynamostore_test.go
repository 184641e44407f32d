package dynamostore_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
)

func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }

var tables atomic.Int64

// freshTable names a table of its own for one store.
func freshTable() string { return fmt.Sprintf("idem_%d", tables.Add(1)) }

// quickRetries makes the SDK's re-sends quick (its default backoff is up to
// 20 s) and gives each client its own retry budget.
func quickRetries(o *dynamodb.Options) {
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxBackoff = 20 * time.Millisecond
	})
}

// env is one store on a table of its own, with the transport its requests go
// through and the clock it reads.
type env struct {
	srv    *dynamotest.Server
	client *dynamodb.Client
	faults *dynamotest.Faults
	store  *dynamostore.Store
	clock  *cachetest.Clock
	table  string
}

// newEnv creates a table from the package's definition, without turning its
// time to live on (the injected clock is not the machine's: DynamoDB Local
// would delete items whose ttl is past by the machine's clock), and opens a
// store on it with table creation off.
func newEnv(t testing.TB, opts dynamostore.Options) *env {
	t.Helper()
	srv := dynamotest.Start(t)
	e := &env{srv: srv, faults: &dynamotest.Faults{Next: http.DefaultTransport.(*http.Transport).Clone()}, table: freshTable()}
	e.client = srv.Client(quickRetries, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: e.faults} })
	def, err := dynamostore.TableDefinition(e.table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.client.CreateTable(ctx, def.Create); err != nil {
		t.Fatal(err)
	}
	if opts.Now == nil {
		e.clock = cachetest.NewClock()
		opts.Now = e.clock.Now
	}
	if e.store, err = dynamostore.New(ctx, e.client, e.table, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	e.faults.Reset()
	return e
}

func TestConformance(t *testing.T) {
	cachetest.Run(t, func(t *testing.T) cachetest.Harness {
		e := newEnv(t, dynamostore.Options{})
		return cachetest.Harness{Store: e.store, Clock: e.clock}
	})
}

// The conformance suite again with every response split over chunk items.
func TestConformanceChunked(t *testing.T) {
	cachetest.Run(t, func(t *testing.T) cachetest.Harness {
		e := newEnv(t, dynamostore.Options{InlineLimit: 1})
		return cachetest.Harness{Store: e.store, Clock: e.clock}
	})
}

// The core's behaviour suite, on tables the store creates itself (time to
// live on, the machine's clock).
func TestMiddlewareSuite(t *testing.T) {
	srv := dynamotest.Start(t)
	client := srv.Client()
	middlewaretest.Run(t, func(t *testing.T) cache.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := dynamostore.New(ctx, client, freshTable(), dynamostore.Options{CreateTable: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
