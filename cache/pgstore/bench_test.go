package pgstore_test

import (
	"testing"

	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/internal/pgtest"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
)

// BenchmarkCorePostgres: the core's first execution and replay against a real
// PostgreSQL on loopback (each includes the round trips: 2 and 1).
func BenchmarkCorePostgres(b *testing.B) {
	middlewaretest.Bench(b, mustNew(b, pgtest.Start(b).Pool(), pgstore.WithTable("bench")))
}
