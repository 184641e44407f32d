package redisstore_test

import (
	"context"
	"github.com/redis/go-redis/v9"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
)

// Complete and release announce a change only for a claim a duplicate waits
// for (Subscribe marks it): a PUBLISH reaches every subscribed instance, so
// announcing every completion would send each to all of them. Messages arrive
// in the order Redis ran the scripts, so the first one heard after an unwaited
// complete and release must be the waited complete's, the next the waited
// release's; delete always announces (every local cache must hear of it).
func TestAnnouncesOnlyWaitedLocks(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	ctx := context.Background()
	s := mustNew(t, client, redisstore.Options{Prefix: "ann:"})
	defer s.Close()
	ps := client.Subscribe(ctx, "ann:notify")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	msgs := ps.Channel()
	claim := func(key string) {
		t.Helper()
		if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "tok-" + key, Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
			t.Fatalf("claim %s: loaded=%v err=%v", key, loaded, err)
		}
	}
	complete := func(key string) {
		t.Helper()
		if err := s.Complete(ctx, key, "tok-"+key, &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	release := func(key string) {
		t.Helper()
		if err := s.Release(ctx, key, "tok-"+key); err != nil {
			t.Fatal(err)
		}
	}
	next := func(want string) {
		t.Helper()
		m, ok := (*redis.Message)(nil), false
		timeout := time.After(10 * time.Second)
		for !ok {
			select {
			case m = <-msgs:
				ok = !strings.HasPrefix(m.Payload, "\x01idemproxy-ping ") // the local cache's own
			case <-timeout:
				t.Fatalf("no announcement of %s", want)
			}
		}
		if m.Payload != "ann:"+want {
			t.Fatalf("announced %q, want %q (only waited locks are announced)", m.Payload, "ann:"+want)
		}
	}
	for _, k := range []string{"unwaited-done", "unwaited-released", "waited-done", "waited-released"} {
		claim(k)
	}
	_, cancelDone := s.Subscribe("waited-done")
	defer cancelDone()
	_, cancelReleased := s.Subscribe("waited-released")
	defer cancelReleased()
	complete("unwaited-done")
	release("unwaited-released")
	complete("waited-done")
	next("waited-done")
	release("waited-released")
	next("waited-released")
	claim("deleted")
	complete("deleted")
	if err := s.Delete(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	next("deleted")
}

// A waiter on one instance marks the claim; the completion on another announces
// it, and wakes the waiter.
func TestWaiterOnAnotherInstanceIsWoken(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a := mustNew(t, srv.Client(), redisstore.Options{Prefix: "across:"})
	defer a.Close()
	b := mustNew(t, srv.Client(), redisstore.Options{Prefix: "across:"})
	defer b.Close()
	if _, loaded, err := a.ClaimOrGet(ctx, "k", cache.Claim{Token: "tok", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("claim: loaded=%v err=%v", loaded, err)
	}
	changed, cancel := b.Subscribe("k")
	defer cancel()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // b listens
		n, err := srv.Client().PubSubNumSub(ctx, "across:notify").Result()
		if err == nil && n["across:notify"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b did not subscribe: %v %v", n, err)
		}
	}
	if err := a.Complete(ctx, "k", "tok", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter on the other instance was not woken by the completion")
	}
}

// Subscribe's mark writes a claim once: every waiting duplicate subscribes again
// at every wake-up and poll, and a write each time (propagated to replicas and
// the append-only file) would let a client that sends duplicates with wait on
// make the server write without bound. A value under the key that is not one
// of the store's records is never written to.
func TestMarkWritesOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	ctx := context.Background()
	s := mustNew(t, client, redisstore.Options{Prefix: "mark:"})
	defer s.Close()
	dirty := func() int64 {
		t.Helper()
		info, err := client.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "rdb_changes_since_last_save:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("no rdb_changes_since_last_save in %q", info)
		return 0
	}
	if _, loaded, err := s.ClaimOrGet(ctx, "k", cache.Claim{Token: "tok", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("claim: loaded=%v err=%v", loaded, err)
	}
	_, cancel := s.Subscribe("k") // the first mark writes
	cancel()
	before := dirty()
	for range 50 {
		_, cancel := s.Subscribe("k")
		cancel()
	}
	if n := dirty() - before; n != 0 {
		t.Fatalf("50 more Subscribes of a marked lock made %d writes, want none", n)
	}
	if err := client.HSet(ctx, "mark:foreign", "st", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, cancel = s.Subscribe("foreign")
	cancel()
	if fields, err := client.HGetAll(ctx, "mark:foreign").Result(); err != nil || len(fields) != 1 {
		t.Fatalf("a foreign hash after Subscribe: %v %v, want it untouched", fields, err)
	}
}
