package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
)

const (
	lease = time.Minute
	ttl   = time.Hour
)

func claimed(t *testing.T, s cache.Store, key string) string {
	t.Helper()
	tok := cachetest.Token()
	if rec, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: tok, Fingerprint: "fp", Duration: lease}); err != nil || loaded {
		t.Fatalf("claim: loaded=%v rec=%+v err=%v", loaded, rec, err)
	}
	return tok
}

func done(status int, body []byte) *cache.Record {
	return &cache.Record{State: cache.StateCompleted, Fingerprint: "fp",
		Response: &cache.Response{Status: status, Header: http.Header{"Content-Type": {"text/plain"}}, Body: body, BodySize: int64(len(body))}}
}

func unknown() *cache.Record {
	rec := done(502, []byte(`{"type":"urn:idemproxy:problem:outcome-unknown"}`))
	rec.Response.Unknown = true
	return rec
}

// lose makes the next request of each call get lost after the server applied
// it (the SDK then re-sends it), runs op, and checks the fault struck.
func lose(t *testing.T, e *env, op func() error, calls ...string) error {
	t.Helper()
	for _, c := range calls {
		e.faults.Inject(c, dynamotest.DropReply, 1)
	}
	before := map[string]int{}
	for _, c := range calls {
		before[c] = e.faults.Injected(c)
	}
	err := op()
	struck := 0
	for _, c := range calls {
		struck += e.faults.Injected(c) - before[c]
	}
	e.faults.Clear()
	if struck == 0 {
		t.Fatalf("no reply of %v was lost: the test did not test", calls)
	}
	return err
}

// A reply lost after DynamoDB applied the request is normal (the SDK re-sends
// it): every operation answers its caller as the first request would have.
func TestLostReplyOnEveryOperation(t *testing.T) {
	ctx := context.Background()
	t.Run("claim", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		var (
			rec    *cache.Record
			loaded bool
		)
		err := lose(t, e, func() (err error) {
			rec, loaded, err = e.store.ClaimOrGet(ctx, key, cache.Claim{Token: "tok-1", Fingerprint: "fp", Duration: lease})
			return err
		}, "PutItem")
		if err != nil || loaded {
			t.Fatalf("claim whose reply was lost: loaded=%v rec=%+v err=%v; want claimed", loaded, rec, err)
		}
		if err := e.store.Complete(ctx, key, "tok-1", done(201, []byte("ok")), ttl); err != nil {
			t.Fatalf("the claimer cannot complete: %v", err)
		}
	})
	t.Run("complete", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		tok := claimed(t, e.store, key)
		if err := lose(t, e, func() error { return e.store.Complete(ctx, key, tok, done(201, []byte("created")), ttl) }, "UpdateItem"); err != nil {
			t.Fatalf("Complete whose reply was lost: %v; want success", err)
		}
		if rec, err := e.store.Get(ctx, key); err != nil || string(rec.Response.Body) != "created" {
			t.Fatalf("after: %+v %v", rec, err)
		}
	})
	t.Run("complete-large", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		tok := claimed(t, e.store, key)
		body := pattern(3 << 20)
		if err := lose(t, e, func() error { return e.store.Complete(ctx, key, tok, done(200, body), ttl) }, "BatchWriteItem", "UpdateItem"); err != nil {
			t.Fatalf("Complete whose replies were lost: %v; want success", err)
		}
		if rec, err := e.store.Get(ctx, key); err != nil || !bytes.Equal(rec.Response.Body, body) {
			t.Fatalf("after: %v (body equal: %v)", err, err == nil && bytes.Equal(rec.Response.Body, body))
		}
	})
	t.Run("complete-on-a-free-key", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		first := claimed(t, e.store, key)
		if err := e.store.Complete(ctx, key, first, done(201, []byte("first")), time.Minute); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(2 * time.Minute) // the first record lapsed (DynamoDB has not deleted it)
		tok := cachetest.Token()         // a holder whose claim lapsed in an outage; nobody else claimed
		if err := lose(t, e, func() error { return e.store.Complete(ctx, key, tok, done(201, []byte("late")), ttl) }, "PutItem"); err != nil {
			t.Fatalf("late Complete whose reply was lost: %v; want success", err)
		}
		if rec, err := e.store.Get(ctx, key); err != nil || string(rec.Response.Body) != "late" {
			t.Fatalf("after: %+v %v", rec, err)
		}
	})
	t.Run("release", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		tok := claimed(t, e.store, key)
		if err := lose(t, e, func() error { return e.store.Release(ctx, key, tok) }, "DeleteItem"); err != nil {
			t.Fatalf("Release whose reply was lost: %v; want success", err)
		}
		claimed(t, e.store, key)
	})
	t.Run("extend", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		tok := claimed(t, e.store, key)
		e.clock.Advance(lease / 2)
		if err := lose(t, e, func() error { return e.store.Extend(ctx, key, tok, lease) }, "UpdateItem"); err != nil {
			t.Fatalf("Extend whose reply was lost: %v; want success", err)
		}
		e.clock.Advance(lease * 3 / 4) // past the first lease, within the renewed one
		if err := e.store.Complete(ctx, key, tok, done(200, []byte("x")), ttl); err != nil {
			t.Fatalf("Complete within the renewed lease: %v", err)
		}
	})
	t.Run("resolve", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		tok := claimed(t, e.store, key)
		if err := e.store.Complete(ctx, key, tok, unknown(), ttl); err != nil {
			t.Fatal(err)
		}
		answer := &cache.Response{Status: 201, Body: []byte("resolved"), BodySize: 8}
		if err := lose(t, e, func() error { return e.store.Resolve(ctx, key, answer, ttl) }, "UpdateItem"); err != nil {
			t.Fatalf("Resolve whose reply was lost: %v; want success", err)
		}
		if rec, err := e.store.Get(ctx, key); err != nil || rec.Response.Unknown || string(rec.Response.Body) != "resolved" {
			t.Fatalf("after: %+v %v", rec, err)
		}
	})
	t.Run("resolve-release", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		tok := claimed(t, e.store, key)
		if err := e.store.Complete(ctx, key, tok, unknown(), ttl); err != nil {
			t.Fatal(err)
		}
		if err := lose(t, e, func() error { return e.store.Resolve(ctx, key, nil, ttl) }, "DeleteItem", "PutItem"); err != nil {
			t.Fatalf("Resolve(nil) whose reply was lost: %v; want success", err)
		}
		if _, err := e.store.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("after: %v, want ErrNotFound", err)
		}
		claimed(t, e.store, key)
	})
	t.Run("delete", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		tok := claimed(t, e.store, key)
		if err := e.store.Complete(ctx, key, tok, done(200, pattern(1<<20)), ttl); err != nil {
			t.Fatal(err)
		}
		if err := lose(t, e, func() error { return e.store.Delete(ctx, key) }, "DeleteItem", "PutItem"); err != nil {
			t.Fatalf("Delete whose reply was lost: %v; want success", err)
		}
		if _, err := e.store.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("after: %v, want ErrNotFound", err)
		}
		claimed(t, e.store, key)
	})
	t.Run("get", func(t *testing.T) {
		e := newEnv(t, dynamostore.Options{})
		key := cachetest.Key(t, "k")
		tok := claimed(t, e.store, key)
		if err := e.store.Complete(ctx, key, tok, done(200, pattern(1<<20)), ttl); err != nil {
			t.Fatal(err)
		}
		var rec *cache.Record
		if err := lose(t, e, func() (err error) { rec, err = e.store.Get(ctx, key); return err }, "GetItem", "BatchGetItem"); err != nil ||
			!bytes.Equal(rec.Response.Body, pattern(1<<20)) {
			t.Fatalf("Get whose replies were lost: %v", err)
		}
	})
}

// pattern is n bytes that differ from chunk to chunk.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/dynamostore.ChunkSize)
	}
	return b
}
