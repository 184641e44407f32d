package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// xidNext is the next transaction id the server will assign (reading it
// assigns none).
func xidNext(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var x int64
	if err := pool.QueryRow(context.Background(), "SELECT txid_snapshot_xmax(txid_current_snapshot())").Scan(&x); err != nil {
		t.Fatal(err)
	}
	return x
}

// An idle instance with a local cache consumes (nearly) no transaction ids:
// its liveness pings (each a NOTIFY, which takes one) stop while nothing
// reads through the cache. (Before, it pinged every 25ms: 40 a second.)
func TestIdleCacheBurnsNoXIDs(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	s := mustNew(t, pool, pgstore.Options{Table: "idle", SweepInterval: -1})
	complete(t, s, "k")
	answeredFromCache(t, s, "k") // the cache is in use, and trusted
	time.Sleep(500 * time.Millisecond)
	const idle = 3 * time.Second
	before := xidNext(t, pool)
	time.Sleep(idle)
	burnt := xidNext(t, pool) - before
	t.Logf("an idle instance consumed %d transaction ids in %v (%.1f/s)", burnt, idle, float64(burnt)/idle.Seconds())
	if burnt > 3 {
		t.Fatalf("an idle instance consumed %d transaction ids in %v", burnt, idle)
	}
	// Used again, it answers from the cache again; replays answered from it
	// nonstop take a transaction id per ping, one every 50ms at most.
	answeredFromCache(t, s, "k")
	const busy = 2 * time.Second
	before = xidNext(t, pool)
	for start := time.Now(); time.Since(start) < busy; {
		answeredFromCache(t, s, "k")
	}
	burnt = xidNext(t, pool) - before
	t.Logf("replays answered from the cache nonstop consumed %d transaction ids in %v (%.1f/s)", burnt, busy, float64(burnt)/busy.Seconds())
	if most := int64(busy/(50*time.Millisecond)) + 3; burnt > most {
		t.Fatalf("an instance in use consumed %d transaction ids in %v, want at most %d", burnt, busy, most)
	}
}
