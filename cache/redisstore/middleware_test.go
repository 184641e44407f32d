package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/middleware/middlewaretest"
	"github.com/redis/go-redis/v9"
)

var post = testutil.Post

// scriptInternal are the commands the store's scripts run inside Redis; INFO
// commandstats counts them too, but they cost no round trip.
var scriptInternal = map[string]bool{
	"exists": true, "hmget": true, "hset": true, "del": true, "pexpire": true, "time": true, "publish": true,
}

// roundTrips reads INFO commandstats and returns the commands clients sent (the
// EVALSHA/EVAL calls), not counting this helper's own INFO and CONFIG calls. Any
// other command a client sent is reported as an error.
func roundTrips(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd := strings.TrimPrefix(name, "cmdstat_")
		calls := 0
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls, _ = strconv.Atoi(v)
			}
		}
		switch {
		case cmd == "info" || strings.HasPrefix(cmd, "config"):
		case cmd == "evalsha" || cmd == "eval":
			total += calls
		case !scriptInternal[cmd]:
			t.Errorf("a client sent %d %s command(s): every operation must be one script", calls, cmd)
		}
	}
	return total
}

func TestRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("needs a server of its own: command statistics are server-wide")
	}
	client := srv.Client()
	admin := srv.Client()
	ctx := context.Background()
	release := make(chan struct{})
	var calls atomic.Int64
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Query().Get("block") != "" {
			<-release
		}
		w.WriteHeader(201)
	})
	// Round trips to Redis: the local cache, which answers replays with
	// none, is off (its own pings would count too).
	store := mustNew(t, client, redisstore.Options{LocalCache: -1})
	defer store.Close()
	idem, err := middleware.New(store)
	if err != nil {
		t.Fatal(err)
	}
	h := idem.Wrap(api)
	post(h, "warm-up", "") // loads the scripts and opens the connection
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	measure := func(what string, want int, fn func()) {
		t.Helper()
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		fn()
		if got := roundTrips(t, admin); got != want {
			t.Errorf("%s: %d Redis commands, want %d", what, got, want)
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
			t.Errorf("mismatch answered %d", w.Code)
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest("POST", "/charge?block=1", nil)
		r.Header.Set("Idempotency-Key", "slow")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}()
	testutil.Eventually(t, 5*time.Second, "the condition", func() bool { return calls.Load() == 3 })
	measure("conflict", 1, func() {
		r := httptest.NewRequest("POST", "/charge?block=1", nil)
		r.Header.Set("Idempotency-Key", "slow")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 409 {
			t.Errorf("conflict answered %d", w.Code)
		}
	})
	close(release)
	<-done
}

func newMiddleware(t *testing.T, c redis.UniversalClient, opts ...middleware.Option) *middleware.Handler {
	t.Helper()
	s := mustNew(t, c, redisstore.Options{})
	t.Cleanup(func() { s.Close() })
	h, err := middleware.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Two independent instances (separate clients) sharing one Redis: concurrent
// duplicates split across them run once, and each replays what the other stored.
func TestTwoInstancesShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	var calls atomic.Int64
	release := make(chan struct{})
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-release
		w.WriteHeader(201)
		_, _ = w.Write([]byte("paid"))
	})
	a := newMiddleware(t, srv.Client()).Wrap(api)
	b := newMiddleware(t, srv.Client()).Wrap(api)

	const n = 200
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		h := a
		if i%2 == 1 {
			h = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- post(h, "shared", "x").Code
		}()
	}
	got := map[int]int{}
	for i := 0; i < n-1; i++ {
		got[<-codes]++
	}
	close(release)
	wg.Wait()
	got[<-codes]++
	if calls.Load() != 1 || got[201] != 1 || got[409] != n-1 {
		t.Fatalf("calls = %d, statuses %v; want one execution, one 201, %d 409s", calls.Load(), got, n-1)
	}
	for name, h := range map[string]http.Handler{"a": a, "b": b} {
		w := post(h, "shared", "x")
		if w.Code != 201 || w.Body.String() != "paid" || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("instance %s replay: %d %q", name, w.Code, w.Body)
		}
	}
	if w := post(b, "other-key", "x"); w.Code != 201 {
		t.Fatal(w.Code)
	}
	if w := post(a, "other-key", "x"); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatal("a did not replay what b stored")
	}
}

// Redis dies: fail closed with 503, never a second execution of a key; it comes
// back: requests work again without a restart.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("needs a server it can stop")
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { client.Close() })
	perKey := map[string]int{}
	var mu sync.Mutex
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		perKey[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(201)
	})
	// No local cache: a completed record is kept by the instance that
	// completed it, which answers its replays for up to the cache's trust
	// window after Redis stops (a replay, correctly); this test is about the
	// calls to the store.
	s := mustNew(t, client, redisstore.Options{LocalCache: -1})
	t.Cleanup(func() { s.Close() })
	core, err := middleware.New(s, func(s *middleware.Settings) { s.StoreTimeout = 2 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	h := core.Wrap(api)
	if w := post(h, "before", "x"); w.Code != 201 {
		t.Fatal(w.Code)
	}
	srv.Stop()
	for i := 0; i < 3; i++ {
		for _, key := range []string{"before", "during"} {
			if w := post(h, key, "x"); w.Code != 503 {
				t.Fatalf("%s with Redis down: %d, want 503", key, w.Code)
			}
		}
	}
	srv.Restart() // empty: the restarted server kept nothing
	testutil.Eventually(t, 5*time.Second, "the condition", func() bool { return post(h, "probe", "x").Code == 201 })
	if w := post(h, "during", "x"); w.Code != 201 || w.Header().Get("Idempotent-Replayed") == "true" {
		t.Fatalf("after recovery: %d", w.Code)
	}
	if w := post(h, "during", "x"); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after recovery, a retry is not replayed: %d", w.Code)
	}
	mu.Lock()
	defer mu.Unlock()
	if perKey["during"] != 1 || perKey["before"] != 1 {
		t.Fatalf("executions per key: %v; the outage must cause none", perKey)
	}
}

// A duplicate on instance B waits for the first request running on instance A and
// is woken by Redis pub/sub (polling is hourly here, so only a message can wake it).
func TestWaitAcrossInstancesPubSub(t *testing.T) {
	srv := redistest.Start(t)
	gate, started := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(started)
			<-gate
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte("done"))
	})
	storeA, storeB := mustNew(t, srv.Client(), redisstore.Options{}), mustNew(t, srv.Client(), redisstore.Options{})
	defer storeA.Close()
	defer storeB.Close()
	t.Cleanup(func() { storeA.Close(); storeB.Close() })
	mk := func(s *redisstore.Store) http.Handler {
		h, err := middleware.New(s, func(s *middleware.Settings) { s.Wait = 30 * time.Second }, func(s *middleware.Settings) { s.WaitPoll = time.Hour })
		if err != nil {
			t.Fatal(err)
		}
		return h.Wrap(api)
	}
	a, b := mk(storeA), mk(storeB)
	firstDone := make(chan struct{})
	go func() { defer close(firstDone); post(a, "wait", "x") }()
	<-started
	const n = 10
	answers := make(chan *httptest.ResponseRecorder, n)
	for i := 0; i < n; i++ {
		go func() { answers <- post(b, "wait", "x") }()
	}
	time.Sleep(200 * time.Millisecond) // let the waiters subscribe (a late one re-reads anyway)
	close(gate)
	<-firstDone
	for i := 0; i < n; i++ {
		select {
		case w := <-answers:
			if w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "done" {
				t.Fatalf("waiter on B: %d %q", w.Code, w.Body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter on B was not woken by pub/sub")
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("calls = %d", calls.Load())
	}
}

// The core's behaviour suite on Redis: each subtest gets its own key prefix on
// one real server, so their records never meet.
func TestMiddlewareSuite(t *testing.T) {
	srv := redistest.Start(t)
	n := 0
	for local, name := range map[int64]string{-1: "off", 0: "default"} {
		t.Run("local_cache="+name, func(t *testing.T) {
			middlewaretest.Run(t, func(t *testing.T) cache.Store {
				n++
				s := mustNew(t, srv.Client(), redisstore.Options{Prefix: fmt.Sprintf("suite%d:", n), LocalCache: local})
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

// Redis killed: once the core knows it is down, a tracked request gets its
// 503 within milliseconds, not after go-redis's dial retries (1.7 s each with
// the default client, before the breaker); nothing runs; once Redis is back,
// requests are served again without a restart, and no request waits for that.
func TestRedisDownAnswersFast(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("needs a server it can stop")
	}
	client, err := redisstore.NewClient(srv.URL()) // the client the proxy and Caddy open: go-redis's defaults
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	var calls atomic.Int64
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); w.WriteHeader(201) })
	h := newMiddleware(t, client).Wrap(api)
	if w := post(h, "before", "x"); w.Code != 201 {
		t.Fatal(w.Code)
	}
	srv.Stop()
	timed := func(key string) (int, time.Duration) {
		began := time.Now()
		w := post(h, key, "x")
		return w.Code, time.Since(began)
	}
	var slowest time.Duration
	for i := range 3 { // what opens it: consecutive failures to reach Redis
		code, d := timed(fmt.Sprint("opening-", i))
		if code != 503 {
			t.Fatalf("with Redis down: %d, want 503", code)
		}
		slowest = max(slowest, d)
	}
	var worst time.Duration
	for i := range 20 {
		code, d := timed(fmt.Sprint("down-", i))
		if code != 503 {
			t.Fatalf("with Redis down, the breaker open: %d, want 503", code)
		}
		worst = max(worst, d)
	}
	t.Logf("503 with Redis down: %v while it opened, at most %v once open", slowest, worst)
	if worst > 200*time.Millisecond {
		t.Fatalf("a 503 with Redis known down took %v (while opening: %v); want a few milliseconds", worst, slowest)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d executions; the outage must cause none", calls.Load()-1)
	}
	srv.Restart()
	began := time.Now()
	testutil.Eventually(t, 10*time.Second, "requests to be served once Redis is back", func() bool {
		code, d := timed(fmt.Sprint("back-", time.Now().UnixNano()))
		if code == 503 && d > 200*time.Millisecond {
			t.Errorf("a request waited %v for the store to come back", d)
		}
		return code == 201
	})
	t.Logf("served again %v after Redis restarted", time.Since(began))
	served := calls.Load()
	if w := post(h, "before", "x"); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "" || calls.Load() != served+1 { // the restarted Redis is empty
		t.Fatalf("after recovery: %d replayed=%q", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
}
