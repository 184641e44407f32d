package redisstore_test

import (
	"testing"

	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
)

// BenchmarkCoreRedis: the core's first execution and replay against a real Redis
// on loopback (each includes the round trips: 2 and 1).
func BenchmarkCoreRedis(b *testing.B) {
	srv := redistest.Start(b)
	store := mustNew(b, srv.Client(), redisstore.Options{})
	defer store.Close()
	middlewaretest.Bench(b, store)
}
