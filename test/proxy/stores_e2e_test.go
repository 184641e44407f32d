package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/prommetrics"
	"github.com/idemproxy/idemproxy/prommetrics/metricstest"
)

// Two instances on one shared store (Redis, PostgreSQL): 200 concurrent
// duplicates across both run once, and both replay it.
func TestE2ETwoProxiesShareAStore(t *testing.T) {
	skipShort(t)
	t.Run("redis", func(t *testing.T) { twoProxies(t, redistest.Start(t).URL()) })
	t.Run("postgres", func(t *testing.T) { twoProxies(t, pgtest.Start(t).URL()) })
}

func twoProxies(t *testing.T, store string) {
	up := testutil.NewUpstream(t)
	a := start(t, "--upstream", up.URL, "--store", store)
	b := start(t, "--upstream", up.URL, "--store", store)
	const n = 200
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for i := 0; i < n; i++ {
		addr := a.Addr
		if i%2 == 1 {
			addr = b.Addr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := testutil.Do(context.Background(), addr, testutil.KeyedPost("/slow?ms=300", "dup", "x"))
			if err != nil {
				codes <- -1
				return
			}
			codes <- r.Status
		}()
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if up.Count("dup") != 1 || got[201]+got[409] != n || got[201] < 1 {
		t.Fatalf("executions %d, statuses %v; want one execution and only 201/409", up.Count("dup"), got)
	}
	for _, p := range []*testutil.Proc{a, b} {
		if r := p.Post(t, "/slow?ms=300", "dup", "x"); !r.Replayed {
			t.Fatalf("%s did not replay: %+v", p.Addr, r)
		}
	}
}

// PostgreSQL as an operator meets it: with schema creation off, a missing table
// stops start-up with one line naming idemproxy migrate; migrate --apply creates
// it; a duplicate on another instance waits (--wait) for the first, woken by
// LISTEN/NOTIFY across processes, and gets its replay.
func TestE2EPostgresMigrateAndWait(t *testing.T) {
	skipShort(t)
	pg := pgtest.Start(t)
	up := testutil.NewUpstream(t)
	code, out := runBin(t, "--upstream", up.URL, "--store", pg.URL(), "--postgres-table", "ops.idem", "--postgres-create-schema=false")
	if code != 1 || !strings.Contains(out, "idemproxy migrate") || strings.Count(strings.TrimSpace(out), "\n") > 0 {
		t.Fatalf("start without the table: exit %d, %q; want exit 1 and one line naming idemproxy migrate", code, out)
	}
	if _, err := pg.Pool().Exec(context.Background(), "CREATE SCHEMA ops"); err != nil {
		t.Fatal(err)
	}
	if code, out := runBin(t, "migrate", "--postgres-table", "ops.idem"); code != 0 || !strings.Contains(out, `CREATE TABLE IF NOT EXISTS "ops"."idem"`) {
		t.Fatalf("migrate (print): exit %d: %s", code, out)
	}
	if code, out := runBin(t, "migrate", "--postgres-table", "a;b"); code != 2 {
		t.Fatalf("migrate with a bad table: exit %d: %s; want 2", code, out)
	}
	if code, out := runBin(t, "migrate", "--apply", "--store", pg.URL(), "--postgres-table", "ops.idem"); code != 0 {
		t.Fatalf("migrate --apply: exit %d: %s", code, out)
	}
	flags := []string{"--upstream", up.URL, "--store", pg.URL(), "--postgres-table", "ops.idem", "--postgres-create-schema=false", "--wait", "10s"}
	a, b := start(t, flags...), start(t, flags...)
	first := make(chan testutil.Response, 1)
	go func() { first <- a.Post(t, "/slow?ms=700", "w", "x") }()
	testutil.Eventually(t, 10*time.Second, "the first execution to start", func() bool { return up.Count("w") == 1 })
	began := time.Now()
	if r := b.Post(t, "/slow?ms=700", "w", "x"); r.Status != 201 || !r.Replayed {
		t.Fatalf("duplicate on the other instance: %+v, want the first's replay", r)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("the waiting duplicate took %v", d)
	}
	if r := <-first; r.Status != 201 || up.Count("w") != 1 {
		t.Fatalf("first: %+v, upstream ran %d times", r, up.Count("w"))
	}
}

// The binary refuses a Redis whose maxmemory-policy may evict in-flight claims,
// in one line, unless --redis-allow-eviction accepts it.
func TestE2EEvictingRedisRefused(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("changes the server's configuration")
	}
	if err := srv.Client().ConfigSet(context.Background(), "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	code, out := runBin(t, "--upstream", "http://127.0.0.1:1", "--store", srv.URL(), "--listen", "127.0.0.1:0")
	if out = strings.TrimSpace(out); code != 1 || !strings.Contains(out, "maxmemory-policy is volatile-ttl") || strings.Contains(out, "\n") {
		t.Fatalf("exit %d, output %q; want exit 1 and one line naming the policy", code, out)
	}
	p := start(t, "--upstream", "http://127.0.0.1:1", "--store", srv.URL(), "--redis-allow-eviction")
	if !strings.Contains(p.Logs.String(), "eviction allowed by configuration") {
		t.Fatalf("no warning when eviction is allowed:\n%s", p.Logs)
	}
}

// Two instances on one shared store, each with its local cache at its default
// (on): A answers replays from its cache, and a purge through B's admin API
// reaches A's cache before B answers it, so the next request through A runs
// again.
func TestE2ELocalCacheAcrossInstances(t *testing.T) {
	skipShort(t)
	t.Run("redis", func(t *testing.T) { localCacheAcross(t, redistest.Start(t).URL()) })
	t.Run("postgres", func(t *testing.T) { localCacheAcross(t, pgtest.Start(t).URL()) })
}

func localCacheAcross(t *testing.T, store string) {
	up := testutil.NewUpstream(t)
	a := start(t, "--upstream", up.URL, "--store", store)
	admin := start(t, "--upstream", up.URL, "--store", store).Admin
	if !strings.Contains(a.Logs.String(), "local cache of completed records on") {
		t.Fatalf("no start-up line about the local cache:\n%s", a.Logs)
	}
	if r := a.Post(t, "/charge", "k", "x"); r.Status != 201 || r.Replayed {
		t.Fatalf("first: %+v", r)
	}
	time.Sleep(500 * time.Millisecond) // the completion's announcement is in
	// The first replay fills A's cache and has A ping its subscription, which
	// it trusts once the ping is back: the others come from it.
	for i := 0; i < 5; i++ {
		if r := a.Post(t, "/charge", "k", "x"); !r.Replayed {
			t.Fatalf("replay %d: %+v", i, r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	req, err := http.NewRequest(http.MethodDelete, "http://"+admin+"/keys/k?host="+testutil.LoadBalancedHost, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("purge through B: %d %s", resp.StatusCode, body)
	}
	if r := a.Post(t, "/charge", "k", "x"); r.Replayed || up.Count("k") != 2 {
		t.Fatalf("after the purge through B, A answered %+v (upstream ran %d times); want a second execution", r, up.Count("k"))
	}
	// A's replays came from its cache: its metrics say so.
	if m := metricsOf(t, a.Admin); !strings.Contains(m, "idemproxy_local_cache_hits_total ") || strings.Contains(m, "idemproxy_local_cache_hits_total 0\n") {
		t.Fatalf("no local cache hits in A's metrics:\n%s", m)
	}
	// On a shared store the proxy exports every metric the dashboard and the
	// rules query but the memory store's, the local cache's included, as package prommetrics defines them.
	s := metricstest.Read(t, "the proxy on a shared store", metricsOf(t, a.Admin))
	metricstest.Check(t, s, "../../examples", prommetrics.MemoryMetrics...)
	metricstest.Same(t, s, metricstest.Reference(t))
}

// Redis killed under the built proxy: once three claims in a row could not
// reach it, a tracked request gets its 503 store-unavailable in milliseconds
// (it took go-redis's dial retries, 1.7 s, each), /readyz says so at once,
// and one line says the store is down; Redis back: the proxy serves again
// without a restart, /readyz is ready, and one line says so. Nothing is
// forwarded meanwhile.
func TestE2ERedisDownAnswersFast(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("needs a server it can stop")
	}
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", srv.URL())
	if r := p.Post(t, "/pay", "before", "x"); r.Status != 201 {
		t.Fatalf("before: %+v", r)
	}
	srv.Stop()
	timed := func(key string) (testutil.Response, time.Duration) {
		began := time.Now()
		r := p.Post(t, "/pay", key, "x")
		return r, time.Since(began)
	}
	var opening time.Duration
	for i := range 3 {
		r, d := timed(fmt.Sprint("opening-", i))
		if r.Status != 503 || !strings.Contains(r.Body, "store-unavailable") {
			t.Fatalf("with Redis down: %+v", r)
		}
		opening = max(opening, d)
	}
	var open time.Duration
	for i := range 20 {
		r, d := timed(fmt.Sprint("down-", i))
		if r.Status != 503 || !strings.Contains(r.Body, "store-unavailable") || r.Header.Get("Retry-After") == "" {
			t.Fatalf("with Redis known down: %+v; want the same 503, with Retry-After", r)
		}
		open = max(open, d)
	}
	began := time.Now()
	ready := testutil.Send(t, p.Admin, testutil.Request{Method: "GET", Target: "/readyz"})
	readyIn := time.Since(began)
	t.Logf("503 with Redis down: %v while the breaker opened, at most %v once open; /readyz in %v", opening, open, readyIn)
	if open > 200*time.Millisecond || ready.Status != 503 || readyIn > 200*time.Millisecond {
		t.Fatalf("with Redis known down: a 503 took up to %v, /readyz %d in %v; want both within milliseconds", open, ready.Status, readyIn)
	}
	if n := strings.Count(p.Logs.String(), `"msg":"idempotency store down`); n != 1 {
		t.Fatalf("%d lines saying the store is down, want 1:\n%s", n, p.Logs)
	}
	srv.Restart()
	testutil.Eventually(t, 10*time.Second, "the proxy to serve once Redis is back", func() bool {
		r, d := timed(fmt.Sprint("back-", time.Now().UnixNano()))
		if r.Status == 503 && d > 200*time.Millisecond {
			t.Errorf("a request waited %v for Redis to come back", d)
		}
		return r.Status == 201
	})
	if r := testutil.Send(t, p.Admin, testutil.Request{Method: "GET", Target: "/readyz"}); r.Status != 200 {
		t.Fatalf("/readyz once Redis is back: %+v", r)
	}
	testutil.Eventually(t, 5*time.Second, "one line saying the store answers again", func() bool {
		return strings.Count(p.Logs.String(), `"msg":"idempotency store answers again`) == 1
	})
	for i := range 3 {
		if n := up.Count(fmt.Sprint("down-", i)) + up.Count(fmt.Sprint("opening-", i)); n != 0 {
			t.Fatalf("forwarded during the outage: %d", n)
		}
	}
}
