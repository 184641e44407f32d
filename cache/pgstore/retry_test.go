package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statements counts, through pg_stat_statements, the statements clients ran
// since the last call, pings (pg_notify on its own) apart. Run one at a time,
// each statement is a round trip.
// Replay counts are written apart (one UPDATE of every key an instance
// replayed, every cache.ReplayFlush): they are counted as flushes, not as any
// request's round trip.
func statements(t *testing.T, admin *pgxpool.Pool) (total, pings int64) {
	total, pings, _ = statementsAndFlushes(t, admin)
	return total, pings
}

func statementsAndFlushes(t *testing.T, admin *pgxpool.Pool) (total, pings, flushes int64) {
	t.Helper()
	ctx := context.Background()
	err := admin.QueryRow(ctx, `SELECT coalesce(sum(calls) FILTER (WHERE query NOT LIKE '%SET replays =%'), 0)::bigint,
	coalesce(sum(calls) FILTER (WHERE query = 'SELECT pg_notify($1, $2)'), 0)::bigint,
	coalesce(sum(calls) FILTER (WHERE query LIKE '%SET replays =%'), 0)::bigint
FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'`).Scan(&total, &pings, &flushes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		t.Fatal(err)
	}
	return total, pings, flushes
}

// settle is how long each step waits before its statements are counted: the
// local cache's ping a step sets off, at most one every Window/4, is counted
// with it.
const settle = 80 * time.Millisecond

// A key's retry, counted at the server: its first execution costs 2 round
// trips (claim, complete), its first replay on the instance that completed it
// none (the Complete kept the record in that instance's local cache), and on
// another instance 1. The caches' pings count too: at a low, steady rate,
// they ride on the Completes.
func TestRetryRoundTripsOnTheWire(t *testing.T) {
	srv := pgtest.Start(t)
	admin := srv.Pool()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	srv.Restart()
	admin.Reset()
	if _, err := admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		t.Skipf("pg_stat_statements is not installed: %v", err)
	}
	pool := srv.Pool()
	table := freshTable()
	instance := func() http.Handler {
		// The local cache at its default (on); no sweeps among the counted statements.
		s := mustNew(t, pool, pgstore.Options{Table: table, SweepInterval: -1})
		idem, err := middleware.New(s)
		if err != nil {
			t.Fatal(err)
		}
		return idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(201)
			_, _ = w.Write([]byte("paid"))
		}))
	}
	a, b := instance(), instance()
	for _, h := range []http.Handler{a, a, b} { // prepares the statements, opens the connections
		testutil.Post(h, "warm-up", "x")
	}
	time.Sleep(time.Second) // the warm-up's pings are out and back
	statements(t, admin)

	step := func(what string, h http.Handler, key string, replay bool, want int64) {
		t.Helper()
		w := testutil.Post(h, key, "x")
		if got := w.Header().Get("Idempotent-Replayed") == "true"; got != replay || w.Code != 201 {
			t.Fatalf("%s: %d, replayed %v", what, w.Code, got)
		}
		time.Sleep(settle)
		if n, pings := statements(t, admin); n != want {
			t.Errorf("%s: %d statements (%d pings), want %d", what, n, pings, want)
		}
	}
	step("first execution", a, "retried", false, 2)
	step("first replay on the completing instance", a, "retried", true, 0)
	step("first replay on another instance", b, "retried", true, 1)

	const keys = 15 // one second at a low rate: 45 requests
	for i := range keys {
		key := fmt.Sprint("low-rate-", i)
		for _, h := range []http.Handler{a, a, b} {
			testutil.Post(h, key, "x")
			time.Sleep(time.Second / (3 * keys))
		}
	}
	time.Sleep(settle)
	n, pings, flushes := statementsAndFlushes(t, admin)
	t.Logf("low rate: %d requests, %d statements, %d of them pings; %d replay-count flushes", 3*keys, n, pings, flushes)
	if flushes > 2*2 { // two instances, one flush each every cache.ReplayFlush (2 s) of the one-second run
		t.Errorf("low rate: %d replay-count flushes, want at most one an instance a cache.ReplayFlush", flushes)
	}
	if n-pings != 3*keys || pings > 2 {
		t.Errorf("low rate: %d statements for %d requests (%d pings), want %d and at most 2 pings", n, 3*keys, pings, 3*keys)
	}
}
