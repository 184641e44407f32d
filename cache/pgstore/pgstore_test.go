package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func mustNew(t testing.TB, pool *pgxpool.Pool, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(context.Background(), pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var tables atomic.Int64

// freshTable names a table of its own for one store.
func freshTable() string {
	return fmt.Sprintf("idem_%d", tables.Add(1))
}

func TestConformance(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	cachetest.Run(t, func(t *testing.T) cachetest.Harness {
		clk := cachetest.NewClock()
		table := freshTable()
		neighbour := func(t *testing.T) cache.Store {
			return mustNew(t, pool, pgstore.Options{Table: table + "_eu", Now: clk.Now})
		}
		return cachetest.Harness{Store: mustNew(t, pool, pgstore.Options{Table: table, Now: clk.Now}), Clock: clk, Neighbour: neighbour}
	})
}

func TestMiddlewareSuite(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	for local, name := range map[int64]string{-1: "off", 0: "default"} {
		t.Run("local_cache="+name, func(t *testing.T) {
			middlewaretest.Run(t, func(t *testing.T) cache.Store {
				return mustNew(t, pool, pgstore.Options{Table: freshTable(), LocalCache: local})
			})
		})
	}
}

// With the server's clock (no injection), claims lapse in real time, and the
// sweeper deletes expired rows in batches while leaving live ones. A record
// completed within its claim is swept once it expired and that claim ended
// (its sweep_at: the claim end plus the TTL the claim named), so these leases
// are short.
func TestServerClockExpiryAndSweep(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	s := mustNew(t, pool, pgstore.Options{Table: "swept", SweepInterval: -1, SweepBatch: 7})
	ctx := context.Background()
	if _, loaded, err := s.ClaimOrGet(ctx, "short", cache.Claim{Token: "a", Fingerprint: "f", Duration: 30 * time.Millisecond}); err != nil || loaded {
		t.Fatalf("claim: loaded=%v err=%v", loaded, err)
	}
	for i := 0; i < 20; i++ {
		tok := fmt.Sprint("t", i)
		key := fmt.Sprint("done-", i)
		ttl := time.Millisecond
		if i%2 == 0 {
			ttl = time.Hour
		}
		if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: "f", Duration: 200 * time.Millisecond, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, key, tok, &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := s.Get(ctx, "short")
		if errors.Is(err, cache.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 30ms lease did not lapse in 5s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, loaded, err := s.ClaimOrGet(ctx, "short", cache.Claim{Token: "b", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("re-claim after lapse: loaded=%v err=%v", loaded, err)
	}
	var n int64
	for n < 10 && time.Now().Before(deadline) { // the ten 1ms records, in batches of 7, once their claims ended
		m, err := s.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += m
		time.Sleep(20 * time.Millisecond)
	}
	if n != 10 {
		t.Fatalf("Sweep deleted %d rows; want the 10 expired ones", n)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM swept").Scan(&rows); err != nil || rows != 11 {
		t.Fatalf("rows left = %d (%v), want 11 (10 live records and the re-claimed lock)", rows, err)
	}
}

// The table name is configurable (schema-qualified too), and validated; with
// schema creation off, a missing table is a clear error at start-up, and the
// DDL Schema prints creates one the store accepts.
func TestTableAndSchema(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	for _, bad := range []string{"a-b", "x; DROP TABLE y", "a.b.c", "1abc"} { // "": the default
		if _, err := pgstore.New(ctx, pool, pgstore.Options{Table: bad}); err == nil {
			t.Fatalf("table %q accepted", bad)
		}
	}
	if _, err := pgstore.New(ctx, pool, pgstore.Options{Table: "absent", SkipCreateSchema: true}); err == nil || !strings.Contains(err.Error(), "idemproxy migrate") {
		t.Fatalf("missing table with schema creation off: %v, want an error naming idemproxy migrate", err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA idem"); err != nil {
		t.Fatal(err)
	}
	ddl, err := pgstore.Schema("idem.records")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatalf("applying the printed DDL: %v\n%s", err, ddl)
	}
	s := mustNew(t, pool, pgstore.Options{Table: "idem.records", SkipCreateSchema: true})
	if _, _, err := s.ClaimOrGet(ctx, "k", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Instances starting together create the table once, without an error.
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			s, err := pgstore.New(ctx, pool, pgstore.Options{Table: "together"})
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent start: %v", err)
		}
	}
}

// A replay and a conflict read, never write: the claim leaves an existing row
// untouched (no row lock, which would set its xmax, and no new version, which
// would change its xmin), for a completed record and a claim in flight alike.
func TestClaimReadsFirst(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	s := mustNew(t, pool, pgstore.Options{Table: "readfirst"})
	ctx := context.Background()
	version := func(key string) string {
		t.Helper()
		var v string
		if err := pool.QueryRow(ctx, "SELECT xmin::text || '/' || xmax::text FROM readfirst WHERE key = $1", []byte(key)).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	lock := func(tok string) cache.Claim { return cache.Claim{Token: tok, Fingerprint: "f", Duration: time.Minute} }
	if _, _, err := s.ClaimOrGet(ctx, "done", lock("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "done", "a", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ClaimOrGet(ctx, "running", lock("b")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"done", "running"} {
		before := version(key)
		for i := 0; i < 3; i++ {
			if rec, loaded, err := s.ClaimOrGet(ctx, key, lock("c")); err != nil || !loaded || rec == nil {
				t.Fatalf("%s: duplicate claim: %v %v %v", key, rec, loaded, err)
			}
		}
		if after := version(key); after != before {
			t.Errorf("%s: a duplicate claim wrote the row: xmin/xmax %s → %s", key, before, after)
		}
	}
	// The holder's re-sent claim answers "claimed", also without a write.
	before := version("running")
	if rec, loaded, err := s.ClaimOrGet(ctx, "running", lock("b")); err != nil || loaded || rec != nil {
		t.Fatalf("re-sent claim: %v %v %v", rec, loaded, err)
	}
	if after := version("running"); after != before {
		t.Errorf("a re-sent claim wrote the row: %s → %s", before, after)
	}
}

// The local cache's promises, with the cache at its default (Options.LocalCache
// 0: on, sized from the memory budget).
func TestLocalCacheAcrossInstances(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	cachetest.RunLocalCache(t, func(t *testing.T) cachetest.Instances {
		table := fmt.Sprintf("idem_%d", tables.Add(1))
		a := mustNew(t, pool, pgstore.Options{Table: table}) // the local cache at its default
		b := mustNew(t, pool, pgstore.Options{Table: table})
		for _, s := range []*pgstore.Store{a, b} {
			if st, on := s.LocalCacheStats(); !on || st.MaxBytes <= 0 {
				t.Fatalf("the default store has no local cache: %+v %v", st, on)
			}
		}
		return cachetest.Instances{A: a, B: b, Drop: func(t *testing.T, key string) {
			if _, err := pool.Exec(context.Background(), "DELETE FROM "+table+" WHERE key = $1", []byte(key)); err != nil {
				t.Fatal(err)
			}
		}, Cut: func(t *testing.T) {
			var n int
			err := pool.QueryRow(context.Background(),
				"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()").Scan(&n)
			if err != nil || n == 0 {
				t.Fatalf("terminating the LISTEN connections: %d, %v", n, err)
			}
		}}
	})
}

// Sweep deletes reconcile jobs whose hold has ended (also when no instance
// reconciles any more), and a table made before reconcile, without a job
// table, sweeps as before.
func TestSweepDropsLapsedReconcileJobs(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	s := mustNew(t, pool, pgstore.Options{Table: "jobs_swept", SweepInterval: -1, SweepBatch: 2})
	ctx := context.Background()
	now := time.Now()
	for i := range 5 {
		until := now.Add(time.Hour)
		if i < 3 {
			until = now.Add(-time.Second)
		}
		job := &cache.Job{Method: "GET", URL: "/x", State: cache.JobScheduled, Due: now.Add(time.Hour), Deadline: now.Add(time.Hour), Until: until}
		if err := s.ScheduleReconcile(ctx, fmt.Sprint("k", i), job); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Sweep(ctx); err != nil || n != 3 {
		t.Fatalf("Sweep = %d, %v; want the 3 jobs past their hold", n, err)
	}
	for i := range 5 {
		_, err := s.GetReconcile(ctx, fmt.Sprint("k", i))
		if gone := errors.Is(err, cache.ErrNotFound); gone != (i < 3) {
			t.Fatalf("job k%d: %v", i, err)
		}
	}
	if _, err := pool.Exec(ctx, `DROP TABLE jobs_swept_reconcile`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatalf("Sweep without a job table: %v", err)
	}
}
