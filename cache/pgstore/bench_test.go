package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/procinfo"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
)

// BenchmarkCorePostgres: the core's first execution and replay against a real
// PostgreSQL on loopback (each includes the round trips: 2 and 1).
func BenchmarkCorePostgres(b *testing.B) {
	middlewaretest.Bench(b, mustNew(b, pgtest.Start(b).Pool(), pgstore.Options{Table: "bench"}))
}

// BenchmarkPostgresServerCPU: what one first execution (a claim, then a
// complete, one after the other) costs the PostgreSQL server, in CPU µs of the
// postmaster and its backends per op (pg-µs/op; /proc, in 10 ms ticks, so use
// a few thousand ops), in WAL bytes per op (wal-B/op), and what each record
// leaves in the table and its indexes (heap-B/op, index-B/op: the relations'
// sizes over the ops; meaningful for large counts). Pin it away from the
// server for steadier figures:
//
//	taskset -c 1 go test -run '^$' -bench PostgresServerCPU -benchtime 6000x ./cache/pgstore
func BenchmarkPostgresServerCPU(b *testing.B) {
	srv := pgtest.Start(b)
	s := mustNew(b, srv.Pool(), pgstore.Options{Table: "cpu"})
	ctx := context.Background()
	rec := &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201, Body: []byte(`{"id":"ch_1","status":"paid"}`)}}
	run := func(i int) {
		key := fmt.Sprintf("%s-%d", b.Name(), i)
		if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute, TTL: time.Hour}); err != nil || loaded {
			b.Fatalf("claim: loaded=%v err=%v", loaded, err)
		}
		if err := s.Complete(ctx, key, "t", rec, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 200; i++ { // warm: prepared statements, generic plans
		run(-i - 1)
	}
	var wal0 string
	if err := srv.Pool().QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&wal0); err != nil {
		b.Fatal(err)
	}
	cpu0 := procinfo.TreeCPUTime(srv.PID())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(i)
	}
	b.StopTimer()
	b.ReportMetric(float64((procinfo.TreeCPUTime(srv.PID())-cpu0).Microseconds())/float64(b.N), "pg-µs/op")
	var wal, heap, index float64
	if err := srv.Pool().QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn), pg_table_size('cpu'), pg_indexes_size('cpu')`, wal0).Scan(&wal, &heap, &index); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(wal/float64(b.N), "wal-B/op")
	b.ReportMetric(heap/float64(b.N+200), "heap-B/op")
	b.ReportMetric(index/float64(b.N+200), "index-B/op")
}
