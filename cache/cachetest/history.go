package cachetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// sampleInfo is a first request as the middleware describes it.
func sampleInfo(h Harness) *cache.Info {
	return &cache.Info{Method: "POST", Path: "/orders/7", Route: "/orders/", RequestID: "req-1a2b",
		Client: "192.0.2.7:51000", FirstSeen: h.Clock.Now().Add(-time.Second)}
}

// wantRequest checks each field of rec's Info against want, one subtest a
// field: a store that loses one fails by its name.
func wantRequest(t *testing.T, what string, rec *cache.Record, want *cache.Info) *cache.Info {
	t.Helper()
	got, err := cache.InfoOf(rec)
	if err != nil || got == nil {
		t.Fatalf("%s: info %v, %v; want the claim's", what, got, err)
	}
	for _, f := range []struct{ name, got, want string }{
		{"method", got.Method, want.Method},
		{"path", got.Path, want.Path},
		{"route", got.Route, want.Route},
		{"request_id", got.RequestID, want.RequestID},
		{"client", got.Client, want.Client},
		{"first_seen", got.FirstSeen.UTC().String(), want.FirstSeen.UTC().String()},
	} {
		if f.got != f.want {
			t.Errorf("%s: %s %q, want %q", what, f.name, f.got, f.want)
		}
	}
	return got
}

func claimWithInfo(t *testing.T, s cache.Store, key string, info *cache.Info, hold time.Duration) string {
	t.Helper()
	tok := Token()
	rec, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: tok, Fingerprint: "fp", Duration: lease,
		Hold: hold, Trace: []byte("tr"), Info: cache.EncodeInfo(info)})
	if err != nil || loaded {
		t.Fatalf("ClaimOrGet(%s): loaded=%v rec=%+v err=%v", key, loaded, rec, err)
	}
	return tok
}

// testRequestKeptInFlight: a claim's Info (method, path, route, request id,
// client, first seen) is read back while it is in flight.
func testRequestKeptInFlight(t *testing.T, h Harness) {
	key := Key(t, "k")
	info := sampleInfo(h)
	claimWithInfo(t, h.Store, key, info, 0)
	wantRequest(t, "in flight", mustGet(t, h.Store, key), info)
}

// deferred is a cache.ClaimSource that counts its calls and reads the store
// from inside them: a store that built the info under a lock of its own
// would deadlock.
type deferred struct {
	s           cache.Store
	key         string
	info        string
	infos, owns int
}

func (d *deferred) ClaimInfo() string {
	d.infos++
	_, _ = d.s.Get(context.Background(), d.key)
	return d.info
}

func (d *deferred) ClaimOwner() string {
	d.owns++
	_, _ = d.s.Get(context.Background(), d.key)
	return "0123456789abcdef"
}

// testRequestDeferred: a claim whose Info comes from Claim.Deferred keeps
// it as if it had come in Info, each store asking for it at most once a
// claim and never under a lock of its own.
func testRequestDeferred(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	info := sampleInfo(h)
	d := &deferred{s: h.Store, key: key, info: cache.EncodeInfo(info)}
	tok := Token()
	if rec, loaded, err := h.Store.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: "fp", Duration: lease, Deferred: d}); err != nil || loaded {
		t.Fatalf("ClaimOrGet: loaded=%v rec=%+v err=%v", loaded, rec, err)
	}
	if d.infos != 1 || d.owns > 1 {
		t.Fatalf("a new claim asked for its info %d times and its owner %d; want 1 and at most 1", d.infos, d.owns)
	}
	wantRequest(t, "in flight", mustGet(t, h.Store, key), info)
	// A claim that finds the record: the memory store builds nothing for it.
	d2 := &deferred{s: h.Store, key: key, info: cache.EncodeInfo(info)}
	if _, loaded, err := h.Store.ClaimOrGet(ctx, key, cache.Claim{Token: Token(), Fingerprint: "fp", Duration: lease, Deferred: d2}); err != nil || !loaded {
		t.Fatalf("a second claim: loaded=%v err=%v", loaded, err)
	}
	if d2.infos > 1 || d2.owns > 1 {
		t.Fatalf("a claim that found the record asked for its info %d times and its owner %d; want at most once each", d2.infos, d2.owns)
	}
	if _, inProcess := h.Store.(cache.InProcess); inProcess && (d2.infos != 0 || d2.owns != 0) {
		t.Fatalf("an in-process store built info %d and owner %d times for a claim that found a record; want none (a replay builds neither)", d2.infos, d2.owns)
	}
}

// testRequestKeptCompleted: a completed record's Info is its response's,
// kept by the store and read back by Get and by a claim that finds it.
func testRequestKeptCompleted(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	info := sampleInfo(h)
	tok := claimWithInfo(t, h.Store, key, info, 0)
	resp := &cache.Response{Status: 201, Body: []byte("ok"), BodySize: 2, Info: cache.EncodeInfo(info)}
	if err := h.Store.Complete(ctx, key, tok, &cache.Record{State: cache.StateCompleted, Fingerprint: "fp", Response: resp}, ttl); err != nil {
		t.Fatal(err)
	}
	wantRequest(t, "completed (Get)", mustGet(t, h.Store, key), info)
	rec, loaded, err := h.Store.ClaimOrGet(ctx, key, cache.Claim{Token: Token(), Fingerprint: "fp", Duration: lease})
	if err != nil || !loaded {
		t.Fatalf("claim of a completed key: loaded=%v err=%v", loaded, err)
	}
	wantRequest(t, "completed (claim)", rec, info)
}

// testRequestKeptHeldByLapse: a claim that lapsed is read as held with its
// Info, and an EventHeld ByLapse as its history.
func testRequestKeptHeldByLapse(t *testing.T, h Harness) {
	key := Key(t, "k")
	info := sampleInfo(h)
	claimWithInfo(t, h.Store, key, info, hold)
	h.Clock.Advance(lease + time.Second)
	rec := mustGet(t, h.Store, key)
	if !rec.Lapsed {
		t.Fatalf("Get after the lease: %+v, want a lapsed claim", rec)
	}
	got := wantRequest(t, "held by lapse", rec, info)
	if len(got.Events) != 1 || got.Events[0].Kind != cache.EventHeld || got.Events[0].By != cache.ByLapse {
		t.Fatalf("held by lapse: history %+v, want one held event by %s", got.Events, cache.ByLapse)
	}
}

// testHistoryResolved: cache.Settle resolving a held key keeps its request
// and adds who resolved it; the resolved record keeps both.
func testHistoryResolved(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	info := sampleInfo(h)
	claimWithInfo(t, h.Store, key, info, hold)
	h.Clock.Advance(lease + time.Second)
	at := h.Clock.Now()
	if _, err := cache.Settle(ctx, h.Store, key, &cache.Response{Status: 200, Body: []byte("done"), BodySize: 4}, ttl, cache.ByOperator, at); err != nil {
		t.Fatal(err)
	}
	rec := mustGet(t, h.Store, key)
	got := wantRequest(t, "resolved", rec, info)
	if n := len(got.Events); n != 2 || got.Events[0].Kind != cache.EventHeld || got.Events[1].Kind != cache.EventResolved ||
		got.Events[1].By != cache.ByOperator || !got.Events[1].At.Equal(at) {
		t.Fatalf("resolved: history %+v, want held then resolved by %s at %v", got.Events, cache.ByOperator, at)
	}
}

// testHistoryReleased: cache.Settle releasing a held key answers its last
// history, released by whom, and the key is free.
func testHistoryReleased(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	info := sampleInfo(h)
	claimWithInfo(t, h.Store, key, info, hold)
	h.Clock.Advance(lease + time.Second)
	got, err := cache.Settle(ctx, h.Store, key, nil, 0, cache.ByReconcile, h.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.RequestID != info.RequestID || len(got.Events) != 2 || got.Events[1].Kind != cache.EventReleased || got.Events[1].By != cache.ByReconcile {
		t.Fatalf("released: %+v, want the request and a release by %s", got, cache.ByReconcile)
	}
	if _, err := h.Store.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get after the release: %v, want ErrNotFound", err)
	}
}

// testReplaysCounted: CountReplay counts (after FlushReplays) into
// Record.Replays and Record.LastReplay; a count for another record under the
// key (another CreatedAt) is dropped.
func testReplaysCounted(t *testing.T, h Harness) {
	rc, ok := h.Store.(cache.ReplayCounter)
	if !ok {
		t.Skipf("%T counts no replays", h.Store)
	}
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, tok, &cache.Record{State: cache.StateCompleted, Fingerprint: "fp", Response: &cache.Response{Status: 200}}, ttl); err != nil {
		t.Fatal(err)
	}
	rec := mustGet(t, h.Store, key)
	if rec.Replays != 0 || !rec.LastReplay.IsZero() {
		t.Fatalf("before any replay: %d replays, last %v", rec.Replays, rec.LastReplay)
	}
	first, last := h.Clock.Now().Add(time.Second), h.Clock.Now().Add(2500*time.Millisecond)
	rc.CountReplay(key, rec.CreatedAt, first)
	rc.CountReplay(key, rec.CreatedAt, last)
	rc.CountReplay(key, rec.CreatedAt.Add(-time.Hour), last.Add(time.Hour)) // an earlier record's
	if err := rc.FlushReplays(ctx); err != nil {
		t.Fatal(err)
	}
	rec = mustGet(t, h.Store, key)
	if rec.Replays != 2 || !rec.LastReplay.Equal(last) {
		t.Fatalf("after two replays: %d replays, last %v; want 2, %v", rec.Replays, rec.LastReplay, last)
	}
	rc.CountReplay(key, rec.CreatedAt, first) // an earlier replay, flushed late
	if err := rc.FlushReplays(ctx); err != nil {
		t.Fatal(err)
	}
	if rec = mustGet(t, h.Store, key); rec.Replays != 3 || !rec.LastReplay.Equal(last) {
		t.Fatalf("after a third: %d replays, last %v; want 3, %v", rec.Replays, rec.LastReplay, last)
	}
	// A count of a key with no record creates none.
	gone := Key(t, "gone")
	rc.CountReplay(gone, rec.CreatedAt, last)
	if err := rc.FlushReplays(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Get(ctx, gone); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get of a key only counted: %v, want ErrNotFound", err)
	}
}
