package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
)

// updates reads the table's count of updated rows and of those that were
// HOT updates, once the store's backends have flushed their statistics
// (every second at most, at a transaction's end): it polls until the count
// of updates reaches want.
func updates(t testing.TB, pool *pgxpool.Pool, table string, want int64) (upd, hot int64) {
	t.Helper()
	ctx := context.Background()
	// A backend flushes its statistics at most once a second, and 10s after
	// it went idle: ask every idle one to flush at its next transaction.
	conns, err := pool.AcquireAllIdle(ctx), error(nil)
	for _, c := range conns {
		if err == nil {
			_, err = c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		}
		c.Release()
	}
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).Scan(&upd, &hot)
		if err != nil {
			t.Fatal(err)
		}
		if upd >= want || time.Now().After(deadline) {
			return upd, hot
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCompleteIsHOT: the completion of a claim its claim wrote is a HOT
// update (no index holds a column it changes, and the page has room for the
// completed row), for responses of a few hundred bytes: every one when first
// executions follow one another, nearly every one when concurrent ones are
// batched (a page that took several locks at once may lack the room for all
// their completed rows: BENCHMARKS.md measures it by response size).
func TestCompleteIsHOT(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	s := mustNew(t, pool, pgstoreOptions("hot"))
	ctx := context.Background()
	body := []byte(`{"id":"ch_1","object":"charge","amount":2000,"currency":"eur","status":"succeeded","metadata":{"order":"` + strings.Repeat("7", 200) + `"}}`)
	rec := &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body}}
	var done int64
	run := func(workers, n int) {
		errs := make(chan error, workers)
		for w := range workers {
			go func() {
				for i := w; i < n; i += workers {
					key := fmt.Sprintf("%d-%064x", workers, i)
					tok := fmt.Sprint("t", i)
					if _, loaded, err := s.ClaimOrGet(ctx, key, hotLock(tok)); err != nil || loaded {
						errs <- fmt.Errorf("claim %d: loaded=%v err=%v", i, loaded, err)
						return
					}
					if err := s.Complete(ctx, key, tok, rec, 24*time.Hour); err != nil {
						errs <- fmt.Errorf("complete %d: %v", i, err)
						return
					}
				}
				errs <- nil
			}()
		}
		for range workers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		done += int64(n)
	}
	run(1, 200)
	if upd, hot := updates(t, pool, "hot", done); upd != done || hot != upd {
		t.Fatalf("200 claims then completes: %d updates, %d of them HOT; want 200, all HOT", upd, hot)
	}
	run(8, 400)
	if upd, hot := updates(t, pool, "hot", done); upd != done || hot < done*95/100 {
		t.Fatalf("then 400 by 8 workers: %d updates in all, %d of them HOT; want %d, at least 95%% HOT", upd, hot, done)
	}
}

func pgstoreOptions(table string) pgstore.Options {
	return pgstore.Options{Table: table, SweepInterval: -1}
}

func hotLock(tok string) cache.Claim {
	return cache.Claim{Token: tok, Fingerprint: "f", Duration: time.Minute, Hold: 24 * time.Hour, TTL: 24 * time.Hour}
}

// TestCompleteIsHOTThroughTheMiddleware: the middleware names the route's TTL
// in its claims (cache.Claim.TTL), which is what lets the completion keep
// sweep_at; with any TTL, every completion is a HOT update.
func TestCompleteIsHOTThroughTheMiddleware(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	store := mustNew(t, pool, pgstore.Options{Table: "hot_core", SweepInterval: -1, LocalCache: -1})
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.TTL = 90 * time.Minute })
	if err != nil {
		t.Fatal(err)
	}
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1","status":"paid"}`))
	}))
	for i := range 50 {
		if w := post(h, fmt.Sprint("key-", i), "amount=1"); w.Code != http.StatusCreated {
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body)
		}
	}
	if upd, hot := updates(t, pool, "hot_core", 50); upd != 50 || hot != 50 {
		t.Fatalf("50 first executions: %d updates, %d of them HOT; want 50, all HOT", upd, hot)
	}
}
