package dynamostore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/middleware"
)

// A 7 MB response's chunks all go to one partition, which takes about 1 MB a
// second. A Complete throttled part-way fails; the next Complete of the same
// token and response (the middleware's retry) writes only the chunks the
// first did not, and lands. The response has many headers: its encoding, and
// so its chunks' version, is the same on every call.
func TestLargeCompleteResumesWhereItStopped(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dynamostore.Options{})
	key := cachetest.Key(t, "k")
	tok := claimed(t, e.store, key)
	rec := done(200, pattern(7<<20))
	for _, h := range []string{"Date", "Etag", "Server", "Vary", "X-Request-Id", "X-Trace", "Cache-Control", "Content-Language"} {
		rec.Response.Header.Set(h, h+"-value")
	}
	blob, err := cache.EncodeResponse(rec.Response)
	if err != nil {
		t.Fatal(err)
	}
	total := (len(blob) + dynamostore.ChunkSize - 1) / dynamostore.ChunkSize

	// A budget of five chunks whose clock never moves: writes stop after it.
	frozen := time.Now()
	e.faults.LimitWrites(5*dynamostore.ChunkSize+4096, func() time.Time { return frozen })
	start := time.Now()
	if err := e.store.Complete(ctx, key, tok, rec, ttl); err == nil {
		t.Fatal("Complete with writes throttled part-way succeeded; want it to fail")
	}
	t.Logf("the throttled Complete failed after %v", time.Since(start))
	first := e.faults.Puts()
	if first == 0 || first >= total || chunkItems(t, e) != first {
		t.Fatalf("the first Complete put %d chunks (%d in the table) of %d; want some, not all", first, chunkItems(t, e), total)
	}
	if got, err := e.store.Get(ctx, key); err != nil || got.State != cache.StateInFlight {
		t.Fatalf("after the failed Complete: %+v, %v; want the lock still in flight", got, err)
	}

	e.faults.LimitWrites(0, nil) // unthrottled, still counted
	e.faults.Reset()
	if err := e.store.Complete(ctx, key, tok, rec, ttl); err != nil {
		t.Fatalf("the next Complete: %v", err)
	}
	if got := e.faults.Puts(); got != total-first {
		t.Fatalf("the next Complete put %d chunks; want the %d the first did not (%d in all)", got, total-first, total)
	}
	got, err := e.store.Get(ctx, key)
	if err != nil || !bytes.Equal(got.Response.Body, rec.Response.Body) || got.Response.Header.Get("X-Trace") != "X-Trace-value" {
		t.Fatalf("stored: %v (body equal %v)", err, err == nil && bytes.Equal(got.Response.Body, rec.Response.Body))
	}
	if n := chunkItems(t, e); n != total {
		t.Fatalf("%d chunk items in the table, want %d: one set, nothing written twice under another version", n, total)
	}
}

// Through the middleware, with store_timeout 5s (the default) and writes at
// about 1 MB a second, as one DynamoDB partition takes them: a 7 MB response,
// whose Complete takes longer than store_timeout, lands with its first
// Complete, each request bounded on its own (no retry in the background), and
// replays. (At 2s, a loaded machine broke it: DynamoDB Local's JVM then
// answers one request in up to 1.6 s, and a chunk write or a claim ran out of
// its bound.)
func TestLargeCompleteAtPartitionPace(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 7 MB at 1 MB a second")
	}
	const storeTimeout = 5 * time.Second
	e := newEnv(t, dynamostore.Options{Now: time.Now, RequestTimeout: storeTimeout})
	e.faults.LimitWrites(1<<20, nil)
	var logs bytes.Buffer
	core, err := middleware.New(e.store, func(s *middleware.Settings) {
		s.StoreTimeout = storeTimeout
		s.MaxBody = 8 << 20
		s.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("the middleware's log:\n%s", logs.String())
		}
	}()
	up := newAPI()
	h := core.Wrap(up)
	const size = 7 << 20
	start := time.Now()
	if w := send(h, "big", "size="+strconv.Itoa(size), "x"); w.Code != 201 || w.Body.Len() != size {
		t.Fatalf("first: %d, %d bytes", w.Code, w.Body.Len())
	}
	took := time.Since(start)
	if s := logs.String(); strings.Contains(s, "not stored") {
		t.Fatalf("the first Complete did not store the response (in %v):\n%s", took, s)
	}
	if took <= storeTimeout {
		t.Fatalf("the first execution took %v, no longer than store_timeout %v: this shows nothing", took, storeTimeout)
	}
	again := send(h, "big", "size="+strconv.Itoa(size), "x")
	if again.Code != 201 || again.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body.Bytes(), pattern(size)) {
		t.Fatalf("replay: %d replayed=%q, %d bytes", again.Code, again.Header().Get("Idempotent-Replayed"), again.Body.Len())
	}
	if n := up.count("big"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
	t.Logf("7 MiB at 1 MiB/s: the first execution took %v, %d chunk items put", took, e.faults.Puts())
}
