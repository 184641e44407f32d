package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// countingHook counts what the client sends: pipelines and single commands.
type countingHook struct {
	pipelines, pipelined, singles atomic.Int64
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.singles.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		h.pipelined.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// pipelinedStore starts a server of the test's own and a store on it with n
// pipelines, closed when the test ends.
func pipelinedStore(t *testing.T, n int) (*redistest.Server, *redis.Client, *redisstore.Store) {
	t.Helper()
	srv := redistest.Start(t)
	client := srv.Client()
	s := mustNew(t, client, redisstore.Options{Pipelines: n})
	t.Cleanup(func() { s.Close() })
	return srv, client, s
}

// The conformance suite once more with every call sent on its own.
func TestConformanceUnpipelined(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	cachetest.Run(t, func(t *testing.T) cachetest.Harness {
		clk := cachetest.NewClock()
		s := mustNew(t, client, redisstore.Options{Now: clk.Now, Pipelines: -1})
		t.Cleanup(func() { s.Close() })
		return cachetest.Harness{Store: s, Clock: clk}
	})
}

// Concurrent calls share pipelines: fewer writes than calls, every answer the
// caller's own, and still one EVALSHA per call on the server.
func TestPipelinesBatchConcurrentCalls(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("needs a server of its own: command statistics are server-wide")
	}
	client := srv.Client()
	hook := &countingHook{}
	client.AddHook(hook)
	s := mustNew(t, client, redisstore.Options{Pipelines: 2, LocalCache: -1}) // no pings among the commands counted
	defer s.Close()
	ctx := context.Background()
	burst(t, s, "warm", 400) // opens the connections and loads the scripts
	client.ConfigResetStat(ctx)
	hook.pipelines.Store(0)
	hook.pipelined.Store(0)
	hook.singles.Store(0)

	const n = 400
	burst(t, s, "batch", n)
	calls := int64(3 * n)
	sent := hook.singles.Load() + hook.pipelines.Load()
	t.Logf("%d calls went out in %d pipelines (%d commands) and %d single commands", calls, hook.pipelines.Load(), hook.pipelined.Load(), hook.singles.Load())
	if got := hook.pipelined.Load() + hook.singles.Load(); got != calls {
		t.Fatalf("%d commands sent for %d calls", got, calls)
	}
	if sent >= calls {
		t.Fatalf("no batching: %d sends for %d concurrent calls", sent, calls)
	}
	if got := int64(roundTrips(t, client)); got != calls {
		t.Fatalf("server ran %d scripts for %d calls; each call must be exactly one", got, calls)
	}
}

// burst runs n concurrent claim, complete and replay sequences on distinct keys
// and checks every answer.
func burst(t *testing.T, s *redisstore.Store, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			key := fmt.Sprintf("%s-%d", prefix, i)
			tok := fmt.Sprintf("tok-%d", i)
			if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: key, Duration: time.Minute}); err != nil || loaded {
				errs <- fmt.Errorf("claim %s: loaded=%v err=%v", key, loaded, err)
				return
			}
			body := []byte("body of " + key)
			if err := s.Complete(ctx, key, tok, &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 201, Body: body}}, time.Hour); err != nil {
				errs <- fmt.Errorf("complete %s: %v", key, err)
				return
			}
			rec, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "other", Fingerprint: key, Duration: time.Minute})
			if err != nil || !loaded || rec.Fingerprint != key || string(rec.Response.Body) != string(body) {
				errs <- fmt.Errorf("replay %s: loaded=%v err=%v rec=%+v", key, loaded, err, rec)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A server that lost its script cache answers NOSCRIPT inside a pipeline: those
// calls are sent again whole, and every caller gets its answer.
func TestPipelineNoScript(t *testing.T) {
	_, client, s := pipelinedStore(t, 1)
	ctx := context.Background()
	for round := range 3 {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("noscript-%d-%d", round, i)
				if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
					t.Errorf("claim %s after SCRIPT FLUSH: loaded=%v err=%v", key, loaded, err)
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
		if failed.Load() > 0 {
			return
		}
	}
}

// A caller whose deadline passes while its pipeline waits on a stalled server
// gets its deadline error on time, and the store works once the server does.
func TestPipelineCallerDeadline(t *testing.T) {
	_, client, s := pipelinedStore(t, 1)
	ctx := context.Background()
	if err := client.Do(ctx, "CLIENT", "PAUSE", "700", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, _, err := s.ClaimOrGet(short, "stalled", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim on a paused server: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(t0); d > 600*time.Millisecond {
		t.Fatalf("the caller waited %v past its 100ms deadline", d)
	}
	// After the pause, calls go through again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, _, err := s.ClaimOrGet(ctx, "after", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store unusable after the server came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A call whose caller gave up while it waited for a worker is not sent with the
// batch it ends up in: a claim made for a caller that already answered 503 would
// hold the key against the client's retry for a whole claim.
func TestPipelineDropsAbandonedCalls(t *testing.T) {
	_, client, s := pipelinedStore(t, 1)
	ctx := context.Background()
	lock := cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}
	if err := client.Do(ctx, "CLIENT", "PAUSE", "700", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	// The only worker is stuck on this call until the pause ends.
	busy := make(chan error, 1)
	go func() { _, _, err := s.ClaimOrGet(ctx, "busy", lock); busy <- err }()
	time.Sleep(50 * time.Millisecond)
	// This caller gives up while its call waits in the queue…
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, _, err := s.ClaimOrGet(short, "abandoned", lock); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued claim: %v, want context.DeadlineExceeded", err)
	}
	// …and this one, still waiting, will share a batch with it.
	live := make(chan error, 1)
	go func() { _, _, err := s.ClaimOrGet(ctx, "live", lock); live <- err }()
	for _, ch := range []chan error{busy, live} {
		if err := <-ch; err != nil {
			t.Fatalf("claim after the pause: %v", err)
		}
	}
	if _, err := s.Get(ctx, "live"); err != nil {
		t.Fatalf("live claim: %v", err)
	}
	if rec, err := s.Get(ctx, "abandoned"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("the abandoned claim was sent: %+v, %v", rec, err)
	}
}

// After Close, calls fail at once instead of waiting for workers that are gone.
func TestPipelineClosed(t *testing.T) {
	srv := redistest.Start(t)
	s := mustNew(t, srv.Client(), redisstore.Options{})
	s.Close()
	s.Close() // idempotent
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := s.ClaimOrGet(ctx, "k", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim on a closed store: %v, want an immediate error", err)
	}
}

// A connection reset in the middle of a pipeline fails the calls it carried
// with an error (never a wrong answer), and later calls go through.
func TestPipelineConnectionKilled(t *testing.T) {
	srv, _, s := pipelinedStore(t, 2)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("kill-%d-%d", w, i)
				_, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute})
				switch {
				case err != nil:
					failed.Add(1)
				case loaded:
					// The claim ran, its answer was lost, and go-redis retried it:
					// the retry sees its own claim. A caller must treat it as in
					// flight, which is safe: nothing runs twice.
					ok.Add(1)
				default:
					ok.Add(1)
				}
			}
		}()
	}
	for range 5 {
		time.Sleep(30 * time.Millisecond)
		if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) {
				t.Logf("CLIENT KILL: %v", err)
			}
		}
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	if ok.Load() == 0 {
		t.Fatalf("no call succeeded (%d failed)", failed.Load())
	}
	if _, _, err := s.ClaimOrGet(ctx, "after-kill", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil {
		t.Fatalf("claim after the kills: %v", err)
	}
	t.Logf("%d calls answered, %d failed across 5 connection kills", ok.Load(), failed.Load())
}
