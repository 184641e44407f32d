package stores

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"

	"github.com/idemproxy/idemproxy/cache/dynamostore"
)

// The stores' Trace: each takes what its store gives cache.Env.Instrument.

// traceRedis instruments the Redis store's client with redisotel.
func traceRedis(_ string, client any) error {
	c, ok := client.(redis.UniversalClient)
	if !ok {
		return fmt.Errorf("tracing Redis: got a %T", client)
	}
	return redisotel.InstrumentTracing(c)
}

// tracePostgres gives the PostgreSQL store's connections a query tracer
// (pgtrace.go).
func tracePostgres(_ string, client any) error {
	c, ok := client.(*pgx.ConnConfig)
	if !ok {
		return fmt.Errorf("tracing PostgreSQL: got a %T", client)
	}
	c.Tracer = newPGTracer()
	return nil
}

// traceDynamoDB makes each request of the DynamoDB store's client a span
// (dynamotrace.go).
func traceDynamoDB(rawURL string, client any) error {
	o, ok := client.(*dynamostore.Options)
	if !ok {
		return fmt.Errorf("tracing DynamoDB: got a %T", client)
	}
	table, err := dynamostore.ParseURL(rawURL)
	if err != nil {
		return err
	}
	o.ClientOptions = append(o.ClientOptions, dynamoSpans(table))
	return nil
}
