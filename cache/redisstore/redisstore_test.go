package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/redis/go-redis/v9"
)

// harness builds a fresh store (with an injected clock) over client per subtest.
func harness(client redis.UniversalClient) func(t *testing.T) cachetest.Harness {
	return func(t *testing.T) cachetest.Harness {
		clk := cachetest.NewClock()
		s := mustNew(t, client, redisstore.Options{Now: clk.Now})
		t.Cleanup(func() { s.Close() })
		// A prefix that begins with the default one, its own SCAN pattern's
		// metacharacters in it.
		neighbour := func(t *testing.T) cache.Store {
			n := mustNew(t, client, redisstore.Options{Prefix: redisstore.DefaultPrefix + "eu:*?[x]\\:", Now: clk.Now})
			t.Cleanup(func() { n.Close() })
			return n
		}
		return cachetest.Harness{Store: s, Clock: clk, Neighbour: neighbour}
	}
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	cachetest.Run(t, harness(client))
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped under -short")
	}
	cl := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { client.Close() })
	cachetest.Run(t, harness(client))
	// The keys really spread over the nodes, and URL-opened cluster clients work.
	uc, err := redisstore.NewClient(cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	s := mustNew(t, uc, redisstore.Options{})
	defer s.Close()
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if _, _, err := s.ClaimOrGet(ctx, cachetest.Key(t, "spread"), cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil {
			t.Fatalf("claim through URL client: %v", err)
		}
	}
	for _, n := range cl.Nodes {
		if size, err := n.Client().DBSize(ctx).Result(); err != nil || size == 0 {
			t.Fatalf("node %s holds %d keys (err %v): keys did not spread", n.Addr, size, err)
		}
	}
}

// With the server's clock (no injection), PEXPIRE and the in-script check expire
// leases and records in real time.
func TestServerClockExpiry(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{})
	defer s.Close()
	ctx := context.Background()
	key := cachetest.Key(t, "k")
	if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "a", Fingerprint: "f", Duration: 40 * time.Millisecond}); err != nil || loaded {
		t.Fatalf("claim: loaded=%v err=%v", loaded, err)
	}
	// An in-flight claim's hash outlives its claim by 5 minutes (so that a claim
	// that outlived a server restart is found: TestRestartGrace), but the
	// claim lapses on time.
	if ttl := client.PTTL(ctx, "idem:"+key).Val(); ttl <= 5*time.Minute || ttl > 5*time.Minute+40*time.Millisecond {
		t.Fatalf("PTTL after claim = %v, want (5m, 5m40ms]", ttl)
	}
	testutil.Eventually(t, 3*time.Second, "the 40ms lease to lapse", func() bool {
		_, err := s.Get(ctx, key)
		return errors.Is(err, cache.ErrNotFound)
	})
	if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "b", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("re-claim after lapse: loaded=%v err=%v", loaded, err)
	}
	if err := s.Complete(ctx, key, "a", &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200}}, time.Hour); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Complete of the lapsed holder after a new claim: %v, want ErrClaimLost", err)
	}
	if err := s.Complete(ctx, key, "b", &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200}}, 40*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitGone(t, client, "idem:"+key)
	if _, err := s.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get after TTL: %v", err)
	}
}

// A claim that lapses while Redis is down is held for one more lease from
// the first claim that finds it after the restart: the request that holds it may
// have finished during the outage and be retrying to store its response, and a
// client's retry, answered first once Redis is back, would otherwise claim the
// lapsed key and run again (the soak's "Redis down at completion" double runs;
// seen here before the grace). The holder's Complete lands; once the grace ends,
// an abandoned lock is free. The 30-minute soak showed why the grace cannot run
// from the server's start: loading the append-only file took 4.7-6 s, longer
// than the 4 s lease, and 9 keys ran twice.
func TestRestartGrace(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("restarts its own server (unset IDEMPROXY_REDIS_URL)")
	}
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{})
	defer s.Close()
	ctx := context.Background()
	lease := 1500 * time.Millisecond
	finished, abandoned := cachetest.Key(t, "finished"), cachetest.Key(t, "abandoned")
	for _, k := range []string{finished, abandoned} {
		if _, loaded, err := s.ClaimOrGet(ctx, k, cache.Claim{Token: "first", Fingerprint: "f", Duration: lease}); err != nil || loaded {
			t.Fatalf("claim: loaded=%v err=%v", loaded, err)
		}
	}
	_ = client.ShutdownSave(ctx).Err() // saves, exits: the connection drops
	time.Sleep(lease + 500*time.Millisecond)
	srv.Restart()
	restarted := time.Now()
	testutil.Eventually(t, 5*time.Second, "the store to answer", func() bool { return s.Ping(ctx) == nil })
	if rec, loaded, err := s.ClaimOrGet(ctx, finished, cache.Claim{Token: "retry", Fingerprint: "f", Duration: lease}); err != nil || !loaded || rec.State != cache.StateInFlight {
		t.Fatalf("a retry right after the restart: loaded=%v rec=%+v err=%v; want the lock still held (409)", loaded, rec, err)
	}
	if err := s.Complete(ctx, finished, "first", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatalf("the holder's pending Complete: %v", err)
	}
	if rec, loaded, err := s.ClaimOrGet(ctx, finished, cache.Claim{Token: "retry2", Fingerprint: "f", Duration: lease}); err != nil || !loaded || rec.Response == nil {
		t.Fatalf("a retry after the Complete: loaded=%v err=%v; want the replay", loaded, err)
	}
	// The grace runs from the first claim that finds the claim after the
	// restart, not from the server's start (loading data takes seconds, in
	// which nothing is answered): an abandoned lock found a claim after the
	// restart is still held once, then free a claim later.
	time.Sleep(time.Until(restarted.Add(lease + 1100*time.Millisecond)))
	if _, loaded, err := s.ClaimOrGet(ctx, abandoned, cache.Claim{Token: "retry", Fingerprint: "f", Duration: lease}); err != nil || !loaded {
		t.Fatalf("an abandoned lock, first claim after the restart: loaded=%v err=%v; want it held", loaded, err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	if _, loaded, err := s.ClaimOrGet(ctx, abandoned, cache.Claim{Token: "retry", Fingerprint: "f", Duration: lease}); err != nil || loaded {
		t.Fatalf("an abandoned lock after its grace: loaded=%v err=%v; want it free", loaded, err)
	}
}

// A server that refuses INFO to our user (an ACL, a managed Redis) grants no
// restart grace, and a lapsed claim is claimed as before: never an error.
func TestRestartGraceWithoutInfo(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Skipf("ACL SETUSER: %v", err)
	}
	o, _ := redis.ParseURL(srv.URL())
	o.Username, o.Password = "noinfo", "pw"
	c := redis.NewClient(o)
	defer c.Close()
	s := mustNew(t, c, redisstore.Options{})
	defer s.Close()
	key := cachetest.Key(t, "k")
	if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "a", Fingerprint: "f", Duration: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the claim lapses: the claim below takes the grace's path
	if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "b", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("claim of a lapsed lock without INFO: loaded=%v err=%v; want claimed", loaded, err)
	}
}

func waitGone(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for c.Exists(context.Background(), key).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not expire", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNoScript(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{})
	defer s.Close()
	ctx := context.Background()
	flush := func() {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	key := cachetest.Key(t, "k")
	flush()
	if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil {
		t.Fatalf("ClaimOrGet after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := s.Extend(ctx, key, "t", time.Minute); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := s.Complete(ctx, key, "t", &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatalf("Complete after SCRIPT FLUSH: %v", err)
	}
	flush()
	if rec, err := s.Get(ctx, key); err != nil || rec.Response.Status != 201 {
		t.Fatalf("Get after SCRIPT FLUSH: %v %v", rec, err)
	}
	flush()
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete after SCRIPT FLUSH: %v", err)
	}
	flush()
	if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "u", Fingerprint: "f", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	flush()
	if err := s.Release(ctx, key, "u"); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
}

func TestForeignAndCorruptValues(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{})
	defer s.Close()
	ctx := context.Background()
	lock := cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}
	cases := map[string]func(k string){
		"string":       func(k string) { client.Set(ctx, k, "hello", 0) },
		"list":         func(k string) { client.RPush(ctx, k, "a") },
		"foreign hash": func(k string) { client.HSet(ctx, k, "name", "x") },
		"bad version":  func(k string) { client.HSet(ctx, k, "v", "9", "st", "2", "ex", "99999999999999") },
		"bad response": func(k string) {
			client.HSet(ctx, k, "v", "1", "st", "2", "fp", "f", "ca", "1", "ex", "99999999999999", "resp", "\xc1junk")
		},
		"unknown state":   func(k string) { client.HSet(ctx, k, "v", "1", "st", "7", "fp", "f", "ca", "1", "ex", "99999999999999") },
		"bad timestamps":  func(k string) { client.HSet(ctx, k, "v", "1", "st", "1", "fp", "f", "ca", "x", "ex", "99999999999999") },
		"expiry not a ts": func(k string) { client.HSet(ctx, k, "v", "1", "st", "1", "ex", "soon") },
	}
	for name, plant := range cases {
		key := cachetest.Key(t, name)
		plant("idem:" + key)
		if _, _, err := s.ClaimOrGet(ctx, key, lock); !errors.Is(err, cache.ErrCorrupt) && !strings.Contains(errString(err), "WRONGTYPE") {
			t.Errorf("%s: ClaimOrGet err = %v, want a corruption error", name, err)
		} else if err == nil {
			t.Errorf("%s: ClaimOrGet treated a foreign value as a miss", name)
		}
		if _, err := s.Get(ctx, key); err == nil || errors.Is(err, cache.ErrNotFound) {
			t.Errorf("%s: Get err = %v, want a corruption error", name, err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestKeyLayout(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{Prefix: "myapp:idem:"})
	defer s.Close()
	ctx := context.Background()
	key := cachetest.Key(t, "k")
	if _, _, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "tok", Fingerprint: "fp", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	h := client.HGetAll(ctx, "myapp:idem:"+key).Val()
	if h["v"] != "1" || h["st"] != "1" || h["tok"] != "tok" || h["fp"] != "fp" || h["ca"] == "" || h["ex"] == "" {
		t.Fatalf("in-flight hash = %v", h)
	}
	if err := s.Complete(ctx, key, "tok", &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200, Body: []byte("x")}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	h = client.HGetAll(ctx, "myapp:idem:"+key).Val()
	if h["st"] != "2" || h["resp"] == "" || h["tok"] != "tok" {
		t.Fatalf("completed hash = %v (the token stays: a re-sent Complete is recognised by it)", h)
	}
	if ttl := client.TTL(ctx, "myapp:idem:"+key).Val(); ttl < 59*time.Minute || ttl > time.Hour {
		t.Fatalf("TTL = %v, want about an hour", ttl)
	}
}

func TestRedisErrorsSurface(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("needs a server it can stop")
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	defer client.Close()
	s := mustNew(t, client, redisstore.Options{})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	srv.Stop()
	if _, _, err := s.ClaimOrGet(ctx, "k", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err == nil || errors.Is(err, cache.ErrCorrupt) {
		t.Fatalf("ClaimOrGet with Redis down: err = %v, want a connection error", err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with Redis down succeeded")
	}
	if err := s.Release(ctx, "k", "t"); err == nil || errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Release with Redis down: err = %v, want a connection error, not ErrClaimLost", err)
	}
}

// Through Sentinel: the client asks the Sentinel for the master and the suite runs
// against it, opened from a redis+sentinel:// URL as the proxy and Caddy open it.
func TestConformanceSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("sentinel test skipped under -short")
	}
	master := redistest.Start(t)
	if master.External {
		t.Skip("needs a master of its own")
	}
	sentinel := redistest.StartSentinel(t, master)
	client, err := redisstore.NewClient("redis+sentinel://" + sentinel.Addr + "?master_name=mymaster")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	cachetest.Run(t, harness(client))
	// The records landed on the master the Sentinel named.
	if n, err := master.Client().DBSize(context.Background()).Result(); err != nil || n == 0 {
		t.Fatalf("master holds %d keys (%v)", n, err)
	}
}

// mustNew is redisstore.New for tests.
func mustNew(t testing.TB, c redis.UniversalClient, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The local cache's promises, with the cache at its default (Options.LocalCache
// 0: on, sized from the memory budget).
func TestLocalCacheAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	cachetest.RunLocalCache(t, func(t *testing.T) cachetest.Instances {
		prefix := fmt.Sprintf("lc%d:", time.Now().UnixNano())
		open := func() *redisstore.Store {
			s, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if st, on := s.LocalCacheStats(); !on || st.MaxBytes <= 0 {
				t.Fatalf("the default store has no local cache: %+v %v", st, on)
			}
			return s
		}
		admin := srv.Client()
		return cachetest.Instances{A: open(), B: open(), Drop: func(t *testing.T, key string) {
			if err := admin.Del(context.Background(), prefix+key).Err(); err != nil {
				t.Fatal(err)
			}
		}, Cut: func(t *testing.T) {
			if n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result(); err != nil || n == 0 {
				t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v", n, err)
			}
		}}
	})
}

// Reconcile keys expire an hour past the last hold they serve, never sooner:
// jobs a configuration without reconcile leaves behind do not stay for ever.
func TestReconcileKeysExpireWithTheLastHold(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{Prefix: "exp:"})
	defer s.Close()
	ctx := context.Background()
	job := func(hold time.Duration) *cache.Job {
		now := time.Now()
		return &cache.Job{Method: "GET", URL: "/x", State: cache.JobScheduled, Due: now, Deadline: now.Add(time.Hour), Until: now.Add(hold)}
	}
	ttl := func() time.Duration {
		d, err := client.PTTL(ctx, "exp:{reconcile}jobs").Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if err := s.ScheduleReconcile(ctx, "a", job(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if d := ttl(); d < 24*time.Hour || d > 25*time.Hour {
		t.Fatalf("jobs expire in %v, want 25h", d)
	}
	if err := s.ScheduleReconcile(ctx, "b", job(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if d := ttl(); d < 24*time.Hour {
		t.Fatalf("a shorter hold shortened the expiry to %v", d)
	}
	for _, k := range []string{"exp:{reconcile}due"} {
		if d, _ := client.PTTL(ctx, k).Result(); d < 24*time.Hour {
			t.Fatalf("%s expires in %v", k, d)
		}
	}
}

// The local cache needs one pub/sub order: with a Cluster client New refuses
// a size, and its default is none.
func TestLocalCacheRefusedOnCluster(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer c.Close()
	if _, err := redisstore.New(c, redisstore.Options{LocalCache: 1 << 20}); err == nil || !strings.Contains(err.Error(), "Cluster") {
		t.Fatalf("New(cluster, local cache) = %v, want a refusal naming Cluster", err)
	}
	for _, size := range []int64{0, -1} {
		s, err := redisstore.New(c, redisstore.Options{LocalCache: size})
		if err != nil {
			t.Fatalf("New(cluster, LocalCache %d): %v", size, err)
		}
		if st, on := s.LocalCacheStats(); on {
			t.Fatalf("New(cluster, LocalCache %d) has a local cache: %+v", size, st)
		}
		s.Close()
	}
}

// Options.LocalCache: 0 is the default size, on a single node; negative is
// none; a size is that size.
func TestLocalCacheDefault(t *testing.T) {
	srv := redistest.Start(t)
	def, _ := redisstore.DefaultLocalCache()
	for _, c := range []struct {
		opt  int64
		want int64
	}{{0, def}, {-1, 0}, {3 << 20, 3 << 20}} {
		s := mustNew(t, srv.Client(), redisstore.Options{Prefix: "def:", LocalCache: c.opt})
		st, on := s.LocalCacheStats()
		if on != (c.want > 0) || st.MaxBytes != c.want {
			t.Errorf("LocalCache %d: on=%v, %d bytes; want %d", c.opt, on, st.MaxBytes, c.want)
		}
		s.Close()
	}
}

// A held claim's hash lives as long as its hold: expiring at the claim's end
// (plus restartKeepMS) would free the key a crashed instance's claim holds, and
// its retry would run again.
func TestLockLivesForItsHold(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{})
	defer s.Close()
	ctx := context.Background()
	key := cachetest.Key(t, "k")
	if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "a", Fingerprint: "f", Duration: time.Second, Hold: 2 * time.Hour}); err != nil || loaded {
		t.Fatalf("claim: loaded=%v err=%v", loaded, err)
	}
	if ttl := client.PTTL(ctx, redisstore.DefaultPrefix+key).Val(); ttl < 2*time.Hour {
		t.Fatalf("the lock's hash expires in %v, want past its 2h hold", ttl)
	}
	if err := s.Extend(ctx, key, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := client.PTTL(ctx, redisstore.DefaultPrefix+key).Val(); ttl < 2*time.Hour {
		t.Fatalf("after Extend the lock's hash expires in %v, want past its 2h hold", ttl)
	}
}

// After a restart, a held claim is given the restart grace as one without a
// hold is (a retry gets 409 while the pending completion may still land), and
// is held as an unknown outcome after it, not freed.
func TestRestartGraceWithAHold(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("restarts its own server (unset IDEMPROXY_REDIS_URL)")
	}
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{})
	defer s.Close()
	ctx := context.Background()
	lease := 1500 * time.Millisecond
	key := cachetest.Key(t, "k")
	lock := cache.Claim{Token: "first", Fingerprint: "f", Duration: lease, Hold: time.Hour}
	if _, loaded, err := s.ClaimOrGet(ctx, key, lock); err != nil || loaded {
		t.Fatalf("claim: loaded=%v err=%v", loaded, err)
	}
	_ = client.ShutdownSave(ctx).Err()
	time.Sleep(lease + 500*time.Millisecond)
	srv.Restart()
	testutil.Eventually(t, 5*time.Second, "the store to answer", func() bool { return s.Ping(ctx) == nil })
	retry := cache.Claim{Token: "retry", Fingerprint: "f", Duration: lease, Hold: time.Hour}
	if rec, loaded, err := s.ClaimOrGet(ctx, key, retry); err != nil || !loaded || rec.State != cache.StateInFlight {
		t.Fatalf("a retry right after the restart: loaded=%v rec=%+v err=%v; want the lock in flight (the grace)", loaded, rec, err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	rec, loaded, err := s.ClaimOrGet(ctx, key, retry)
	if err != nil || !loaded || !rec.Lapsed || !rec.Found || rec.Response == nil || !rec.Response.Unknown {
		t.Fatalf("a retry after the grace: loaded=%v rec=%+v err=%v; want the lock held as an unknown outcome, found", loaded, rec, err)
	}
	if err := s.Complete(ctx, key, "first", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatalf("the holder's pending Complete: %v", err)
	}
	if rec, _, err := s.ClaimOrGet(ctx, key, retry); err != nil || rec.Lapsed || rec.Response.Status != 201 {
		t.Fatalf("after the pending Complete: rec=%+v err=%v; want its answer", rec, err)
	}
}

// A Delete or Resolve whose context ends while it waits for every instance's
// cache to drop the key says so: it does not report the change settled.
func TestSettleCutShort(t *testing.T) {
	srv := redistest.Start(t)
	s := mustNew(t, srv.Client(), redisstore.Options{})
	bg := context.Background()
	for _, op := range []string{"delete", "resolve"} {
		if _, _, err := s.ClaimOrGet(bg, op, cache.Claim{Token: "h", Fingerprint: "f", Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		rec := &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 502, Unknown: op == "resolve"}}
		if err := s.Complete(bg, op, "h", rec, time.Hour); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond) // half the settle window
		var err error
		if op == "delete" {
			err = s.Delete(ctx, op)
		} else {
			err = s.Resolve(ctx, op, nil, 0)
		}
		cancel()
		if _, gerr := s.Get(bg, op); !errors.Is(gerr, cache.ErrNotFound) {
			t.Skipf("%s: the command itself did not finish within 100ms (%v): nothing to settle", op, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s cut short: %v, want context.DeadlineExceeded", op, err)
		}
	}
}
