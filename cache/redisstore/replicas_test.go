package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/faultproxy"
	"github.com/idemproxy/idemproxy/internal/redistest"
)

// primaryWithReplica starts a primary and a replica that replicates through a
// fault proxy, so a test can cut replication.
func primaryWithReplica(t *testing.T) (primary, replica *redistest.Server, link *faultproxy.Proxy) {
	t.Helper()
	primary = redistest.Start(t)
	if primary.External {
		t.Skip("needs its own redis-server (unset IDEMPROXY_REDIS_URL)")
	}
	link, err := faultproxy.New(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	return primary, redistest.StartReplica(t, link.Addr()), link
}

func claimErr(s cache.Store, key string) error {
	_, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: cachetest.Token(), Fingerprint: "fp", Duration: time.Minute})
	if err == nil && loaded {
		return errors.New("loaded: the key was already held")
	}
	return err
}

// With wait_replicas, a write succeeds only once a replica has it: with
// replication cut, a claim fails (ErrNotReplicated: nothing runs), while a
// replay, which writes nothing, still succeeds. Without it, the claim succeeds
// on the primary alone.
func TestWaitReplicasRefusesUnreplicatedWrites(t *testing.T) {
	primary, _, link := primaryWithReplica(t)
	client := primary.Client()
	for _, pipelines := range []int{-1, 4} { // -1: every call on its own
		waited := mustNew(t, client, redisstore.Options{Pipelines: pipelines, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})
		plain := mustNew(t, client, redisstore.Options{Pipelines: pipelines})
		ctx := context.Background()
		done := keyFor(pipelines, "done")
		if err := claimErr(waited, done); err != nil {
			t.Fatalf("pipelines %d: claim with replication up: %v", pipelines, err)
		}
		// Complete needs the token: claim under a token we keep.
		tok := cachetest.Token()
		kept := keyFor(pipelines, "kept")
		if _, _, err := waited.ClaimOrGet(ctx, kept, cache.Claim{Token: tok, Fingerprint: "fp", Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := waited.Complete(ctx, kept, tok, &cache.Record{Fingerprint: "fp", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
			t.Fatalf("pipelines %d: complete with replication up: %v", pipelines, err)
		}

		link.Blackhole(true)
		if err := claimErr(waited, keyFor(pipelines, "cut")); !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Fatalf("pipelines %d: claim with replication cut = %v, want ErrNotReplicated", pipelines, err)
		}
		if rec, loaded, err := waited.ClaimOrGet(ctx, kept, cache.Claim{Token: cachetest.Token(), Fingerprint: "fp", Duration: time.Minute}); err != nil || !loaded || rec.Response == nil {
			t.Fatalf("pipelines %d: replay with replication cut: loaded=%v err=%v", pipelines, loaded, err)
		}
		if err := claimErr(plain, keyFor(pipelines, "cut-plain")); err != nil {
			t.Fatalf("pipelines %d: claim without waiting, replication cut: %v", pipelines, err)
		}
		// Concurrent claims share pipelines, and one WAIT per pipeline: each
		// claim must still fail, none may be answered as replicated.
		var wg sync.WaitGroup
		var refused atomic.Int64
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := claimErr(waited, keyFor(pipelines, fmt.Sprintf("cut-%d", i))); errors.Is(err, redisstore.ErrNotReplicated) {
					refused.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := refused.Load(); n != 32 {
			t.Fatalf("pipelines %d: %d of 32 concurrent claims refused with replication cut, want all", pipelines, n)
		}
		link.Blackhole(false)
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := claimErr(waited, keyFor(pipelines, fmt.Sprintf("up-%d", i))); err != nil {
					refused.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := refused.Load() - 32; n != 0 {
			t.Fatalf("pipelines %d: %d of 32 concurrent claims failed with replication up", pipelines, n)
		}
		waited.Close()
		plain.Close()
	}
}

// A primary that dies right after acknowledging a claim, before replicating it:
// without waiting, the promoted replica has the key free and a retry runs again
// (a double run); a claim that waited for the replica is still held there.
func TestWaitReplicasClaimSurvivesFailover(t *testing.T) {
	primary, replica, link := primaryWithReplica(t)
	client := primary.Client()
	waited := mustNew(t, client, redisstore.Options{WaitReplicas: 1, WaitTimeout: time.Second})
	defer waited.Close()
	plain := mustNew(t, client, redisstore.Options{})
	defer plain.Close()

	if err := claimErr(waited, "acked"); err != nil {
		t.Fatalf("waited claim: %v", err)
	}
	link.Blackhole(true) // the replica falls behind, as under replication lag
	if err := claimErr(plain, "unacked"); err != nil {
		t.Fatalf("plain claim: %v", err)
	}
	primary.Stop() // SIGKILL
	if err := replica.Client().ReplicaOf(context.Background(), "NO", "ONE").Err(); err != nil {
		t.Fatalf("promoting the replica: %v", err)
	}
	promoted := mustNew(t, replica.Client(), redisstore.Options{})
	defer promoted.Close()
	if err := claimErr(promoted, "acked"); err == nil || errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("after failover, the waited claim's key was free (claim = %v): it would run twice", err)
	}
	if err := claimErr(promoted, "unacked"); err != nil {
		t.Fatalf("after failover, the unwaited claim's key = %v; expected it lost (free), which is what waiting prevents", err)
	}
}

// A waited claim that no replica acknowledged is refused (503, nothing runs),
// and must leave no claim behind: found in the soak's failover phase, where a
// retry's refused claim held the key the first execution's pending Complete was
// waiting for (a Complete on a free key lands, on a held one it gives up), so
// the record was never stored and a later retry ran again.
func TestWaitReplicasRefusedClaimLeavesNoLock(t *testing.T) {
	primary, _, link := primaryWithReplica(t)
	client := primary.Client()
	ctx := context.Background()
	for _, pipelines := range []int{-1, 4} { // -1: every call on its own
		waited := mustNew(t, client, redisstore.Options{Pipelines: pipelines, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
		plain := mustNew(t, client, redisstore.Options{Pipelines: pipelines})
		key := keyFor(pipelines, "refused")
		link.Blackhole(true)
		if err := claimErr(waited, key); !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Fatalf("pipelines %d: claim with replication cut = %v, want ErrNotReplicated", pipelines, err)
		}
		link.Blackhole(false)
		if rec, err := plain.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("pipelines %d: after a refused claim the key holds %+v (err %v), want nothing", pipelines, rec, err)
		}
		// The first execution's pending Complete (its claim lapsed) lands.
		if err := plain.Complete(ctx, key, cachetest.Token(), &cache.Record{Fingerprint: "fp", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
			t.Fatalf("pipelines %d: pending Complete after a refused claim: %v", pipelines, err)
		}
	}
}

func TestWaitReplicasValidation(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		n       int
		timeout time.Duration
	}{{-1, time.Second}, {1, time.Microsecond}, {1, -time.Second}} {
		if _, err := redisstore.New(srv.Client(), redisstore.Options{WaitReplicas: tc.n, WaitTimeout: tc.timeout}); err == nil {
			t.Errorf("WaitReplicas %d, WaitTimeout %v: no error", tc.n, tc.timeout)
		}
	}
}

// BenchmarkWaitReplicas is the cost of waiting for one replica: a first
// execution's claim and complete against a primary with one replica on
// loopback, sequential and with 16 requests in parallel (where one WAIT covers a
// whole pipeline).
//
//	go test -run '^$' -bench WaitReplicas -benchtime 3s ./cache/redisstore
func BenchmarkWaitReplicas(b *testing.B) {
	primary := redistest.Start(b)
	if primary.External {
		b.Skip("needs its own redis-server")
	}
	redistest.StartReplica(b, primary.Addr)
	var n atomic.Int64
	for _, wait := range []int{0, 1} {
		store := mustNew(b, primary.Client(), redisstore.Options{WaitReplicas: wait, WaitTimeout: time.Second})
		op := func() {
			ctx := context.Background()
			key, tok := "bench-wait-"+strconv.FormatInt(n.Add(1), 10), cachetest.Token()
			if _, _, err := store.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: "fp", Duration: time.Minute}); err != nil {
				b.Fatal(err)
			}
			if err := store.Complete(ctx, key, tok, &cache.Record{Fingerprint: "fp", Response: &cache.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)}}, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("replicas=%d/sequential", wait), func(b *testing.B) {
			for b.Loop() {
				op()
			}
		})
		b.Run(fmt.Sprintf("replicas=%d/parallel16", wait), func(b *testing.B) {
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					op()
				}
			})
		})
		store.Close()
	}
}
