package pgstore_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
)

var post = testutil.Post

// turns counts network round trips on the connections it dialled: a write that
// follows a read (or opens the connection) starts one.
type turns struct {
	n atomic.Int64
}

type countedConn struct {
	net.Conn
	t      *turns
	mu     sync.Mutex
	toSend bool // the next write starts a round trip
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.toSend {
		c.t.n.Add(1)
		c.toSend = false
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.toSend = true
	c.mu.Unlock()
	return n, err
}

func (t *turns) dial(cfg *pgxpool.Config) {
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: c, t: t, toSend: true}, nil
	}
	cfg.MaxConns = 1 // one connection: its statement cache is warm after the first use
}

// Round trips on the wire: 2 for a first execution (claim, complete), 1 for a
// replay, a 409 and a 422.
func TestRoundTrips(t *testing.T) {
	var rt turns
	pool := pgtest.Start(t).Pool(rt.dial)
	store := mustNew(t, pool, pgstore.Options{Table: "rt", LocalCache: -1}) // the local cache would answer replays with none
	release := make(chan struct{})
	var calls atomic.Int64
	idem, err := middleware.New(store)
	if err != nil {
		t.Fatal(err)
	}
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Query().Get("block") != "" {
			<-release
		}
		w.WriteHeader(201)
	}))
	// Warm up: each statement is prepared once per connection.
	post(h, "warm", "x")
	post(h, "warm", "x")
	post(h, "warm", "y")

	measure := func(what string, want int64, fn func()) {
		t.Helper()
		before := rt.n.Load()
		fn()
		if got := rt.n.Load() - before; got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
	}
	measure("first execution", 2, func() { post(h, "first", "x") })
	measure("replay", 1, func() {
		if w := post(h, "first", "x"); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("not a replay: %d", w.Code)
		}
	})
	measure("mismatch", 1, func() {
		if w := post(h, "first", "other"); w.Code != 422 {
			t.Errorf("mismatch: %d, want 422", w.Code)
		}
	})
	running := calls.Load()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest("POST", "/charge?block=1", strings.NewReader("b"))
		r.Header.Set("Idempotency-Key", "blocked")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}()
	for calls.Load() == running {
		time.Sleep(time.Millisecond)
	}
	measure("conflict", 1, func() {
		r := httptest.NewRequest("POST", "/charge?block=1", strings.NewReader("b"))
		r.Header.Set("Idempotency-Key", "blocked")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 409 {
			t.Errorf("conflict: %d, want 409", w.Code)
		}
	})
	close(release)
	<-done
}

// faultCase runs one first execution through the middleware while fault strikes
// the database under it, then checks that the client got its answer, that its
// retries are replayed, and that the upstream ran once.
func faultCase(t *testing.T, srv *pgtest.Server, table string, fault func(pool *pgxpool.Pool)) {
	t.Helper()
	pool := srv.Pool()
	store := mustNew(t, pool, pgstore.Options{Table: table})
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.StoreTimeout = 2 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	started, proceed := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(started)
			<-proceed
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte("charged"))
	}))
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- post(h, "k", "amount=1") }()
	<-started
	fault(pool)
	close(proceed)
	if w := <-first; w.Code != 201 || w.Body.String() != "charged" {
		t.Fatalf("first: %d %q, want the upstream's 201", w.Code, w.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := idem.Wait(ctx); err != nil {
		t.Fatalf("the completion retried in the background did not land: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		w := post(h, "k", "amount=1")
		if w.Code == 201 && w.Header().Get("Idempotent-Replayed") == "true" && w.Body.String() == "charged" {
			break
		}
		if w.Code != 503 && w.Code != 409 || time.Now().After(deadline) {
			t.Fatalf("retry: %d %q replayed=%q, want the replay", w.Code, w.Body, w.Header().Get("Idempotent-Replayed"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times, want 1", n)
	}
}

// The database restarts (an immediate shutdown: crash recovery) while the
// first execution runs: the claim survives, the response is stored once the
// server is back, and nothing runs twice.
func TestServerRestartedMidRequest(t *testing.T) {
	srv := pgtest.Start(t)
	faultCase(t, srv, "restart", func(*pgxpool.Pool) {
		srv.Stop()
		time.Sleep(300 * time.Millisecond)
		srv.Restart()
	})
}

// Every connection of the store is killed (pg_terminate_backend) while the
// first execution runs; the pool reconnects.
func TestConnectionsKilledMidRequest(t *testing.T) {
	srv := pgtest.Start(t)
	admin := srv.Pool()
	faultCase(t, srv, "killed", func(*pgxpool.Pool) {
		var killed int
		err := admin.QueryRow(context.Background(),
			"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'").Scan(&killed)
		if err != nil || killed == 0 {
			t.Fatalf("terminated %d backends: %v", killed, err)
		}
	})
}

// A statement that waits on a row locked elsewhere ends at the server's
// statement_timeout: the request is answered 503 and not forwarded; once the
// lock is gone, the retry runs once.
func TestStatementTimeout(t *testing.T) {
	srv := pgtest.Start(t)
	admin := srv.Pool()
	pool := srv.Pool(func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["statement_timeout"] = "300ms" })
	store := mustNew(t, pool, pgstore.Options{Table: "slow"})
	var calls atomic.Int64
	idem, err := middleware.New(store)
	if err != nil {
		t.Fatal(err)
	}
	h := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); w.WriteHeader(201) }))
	post(h, "warm", "x")
	ctx := context.Background()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE slow IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := post(h, "k", "x")
	if w.Code != 503 || calls.Load() != 1 {
		t.Fatalf("claim against a locked table: %d, %d calls; want 503 and nothing forwarded", w.Code, calls.Load())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the claim took %v: statement_timeout did not end it", d)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if w := post(h, "k", "x"); w.Code != 201 || calls.Load() != 2 {
		t.Fatalf("after the lock: %d, %d calls; want the one run", w.Code, calls.Load())
	}
	if w := post(h, "k", "x"); w.Header().Get("Idempotent-Replayed") != "true" || calls.Load() != 2 {
		t.Fatalf("retry: %d replayed=%q, %d calls", w.Code, w.Header().Get("Idempotent-Replayed"), calls.Load())
	}
}

// Concurrent requests' statements share round trips (and transactions): 64
// first executions on one connection take far fewer than 128 round trips,
// and each is claimed and completed exactly once.
func TestConcurrentStatementsBatched(t *testing.T) {
	var rt turns
	pool := pgtest.Start(t).Pool(rt.dial)
	store := mustNew(t, pool, pgstore.Options{Table: "batched_rt"})
	ctx := context.Background()
	if _, _, err := store.ClaimOrGet(ctx, "warm", cache.Claim{Token: "w", Fingerprint: "f", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, "warm", "w", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	const n = 64
	before := rt.n.Load()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, tok := fmt.Sprint("k", i), fmt.Sprint("t", i)
			if _, loaded, err := store.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
				failed.Add(1)
				return
			}
			if err := store.Complete(ctx, key, tok, &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d first executions failed", failed.Load(), n)
	}
	if got := rt.n.Load() - before; got > n { // unbatched: 2n
		t.Errorf("%d round trips for %d first executions, want at most %d (batched)", got, n, n)
	} else {
		t.Logf("%d round trips for %d first executions", got, n)
	}
}
