// Package cachetest is the conformance suite every cache.Store must pass.
//
//	func TestConformance(t *testing.T) {
//		cachetest.Run(t, func(t *testing.T) cachetest.Harness { … })
//	}
//
// Keys are unique per test, so a suite can share one server with other data.
package cachetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Harness is one store under test and the means to move its clock.
type Harness struct {
	Store cache.Store
	// Clock is the clock the store reads. Expiry tests move it forward instead of
	// sleeping; leases and TTLs they use are long in real time (a minute or more), so
	// only the injected clock can make them lapse.
	Clock *Clock
	// Neighbour, when set, opens another store on the same server, reading
	// Clock, whose namespace begins with Store's (a Redis prefix that extends
	// Store's, a PostgreSQL table whose name does): NamespacesApart holds the
	// two to never seeing each other's records. nil skips it.
	Neighbour func(t *testing.T) cache.Store
}

// Clock is a manually advanced clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock set to a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const (
	lease = time.Minute
	ttl   = time.Hour
)

// Run runs the whole suite. newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"ClaimThenInFlight", testClaimThenInFlight},
		{"CompleteThenReplay", testCompleteThenReplay},
		{"RoundTripFidelity", testRoundTripFidelity},
		{"OversizeMarker", testOversizeMarker},
		{"ReleaseFreesKey", testReleaseFreesKey},
		{"IdempotentForToken", testIdempotentForToken},
		{"LateCompleteOnAFreeKey", testLateCompleteOnAFreeKey},
		{"WrongTokenFenced", testWrongTokenFenced},
		{"LapsedLeaseFenced", testLapsedLeaseFenced},
		{"LapsedLockHeld", testLapsedLockHeld},
		{"LapsedLockSettledByItsToken", testLapsedLockSettledByItsToken},
		{"LapsedLockResolved", testLapsedLockResolved},
		{"HoldMovesWithTheLease", testHoldMovesWithTheLease},
		{"ExtendKeepsLock", testExtendKeepsLock},
		{"CompletedRecordExpires", testCompletedRecordExpires},
		{"NoWritesAfterComplete", testNoWritesAfterComplete},
		{"GetAndDelete", testGetAndDelete},
		{"KeysAreIndependent", testKeysAreIndependent},
		{"RaceOneWinner", testRaceOneWinner},
		{"RaceAfterRelease", testRaceAfterRelease},
		{"Ping", testPing},
		{"NotifyOnComplete", testNotifyOnComplete},
		{"NotifyOnRelease", testNotifyOnRelease},
		{"ResolveUnknown", testResolveUnknown},
		{"ReleaseUnknown", testReleaseUnknown},
		{"ResolveOnlyUnknown", testResolveOnlyUnknown},
		{"TraceContextKept", testTraceContextKept},
		{"RequestKeptInFlight", testRequestKeptInFlight},
		{"RequestDeferred", testRequestDeferred},
		{"RequestKeptCompleted", testRequestKeptCompleted},
		{"RequestKeptHeldByLapse", testRequestKeptHeldByLapse},
		{"HistoryResolved", testHistoryResolved},
		{"HistoryReleased", testHistoryReleased},
		{"ReplaysCounted", testReplaysCounted},
		{"ReconcileJobs", testReconcileJobs},
		{"ListHeld", testListHeld},
		{"NamespacesApart", testNamespacesApart},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tc.fn(t, h)
		})
	}
}

// Key returns a store key unique to this test and label.
func Key(t *testing.T, label string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("cachetest:%s:%s:%s", t.Name(), label, hex.EncodeToString(b[:]))
}

// Token returns a fresh random claim token.
func Token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func claim(t *testing.T, s cache.Store, key, fp string) string {
	t.Helper()
	tok := Token()
	rec, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: tok, Fingerprint: fp, Duration: lease})
	if err != nil {
		t.Fatalf("ClaimOrGet(%s): %v", key, err)
	}
	if loaded {
		t.Fatalf("ClaimOrGet(%s): key already held: %+v", key, rec)
	}
	return tok
}

func mustLoad(t *testing.T, s cache.Store, key string) *cache.Record {
	t.Helper()
	rec, loaded, err := s.ClaimOrGet(context.Background(), key, cache.Claim{Token: Token(), Fingerprint: "other", Duration: lease})
	if err != nil {
		t.Fatalf("ClaimOrGet(%s): %v", key, err)
	}
	if !loaded || rec == nil {
		t.Fatalf("ClaimOrGet(%s): claimed a key that should be held (loaded=%v rec=%v)", key, loaded, rec)
	}
	return rec
}

func completed(status int, body string) *cache.Record {
	return &cache.Record{
		State:       cache.StateCompleted,
		Fingerprint: "fp",
		Response:    &cache.Response{Status: status, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte(body), BodySize: int64(len(body))},
	}
}

func testClaimThenInFlight(t *testing.T, h Harness) {
	key := Key(t, "k")
	before := h.Clock.Now()
	claim(t, h.Store, key, "fp-1")
	rec := mustLoad(t, h.Store, key)
	if rec.State != cache.StateInFlight {
		t.Fatalf("state = %v, want in_flight", rec.State)
	}
	if rec.Fingerprint != "fp-1" {
		t.Fatalf("fingerprint = %q, want fp-1", rec.Fingerprint)
	}
	if rec.Response != nil {
		t.Fatalf("in-flight record has a response: %+v", rec.Response)
	}
	if d := rec.CreatedAt.Sub(before); d < -time.Second || d > time.Second {
		t.Fatalf("CreatedAt = %v, want about %v", rec.CreatedAt, before)
	}
}

func testCompleteThenReplay(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, tok, completed(201, "created"), ttl); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	for i := 0; i < 3; i++ { // repeated reads leave the record as it is
		rec := mustLoad(t, h.Store, key)
		if rec.State != cache.StateCompleted || rec.Fingerprint != "fp" {
			t.Fatalf("read %d: state=%v fingerprint=%q", i, rec.State, rec.Fingerprint)
		}
		if rec.Response == nil || rec.Response.Status != 201 || string(rec.Response.Body) != "created" {
			t.Fatalf("read %d: response = %+v", i, rec.Response)
		}
	}
}

func testRoundTripFidelity(t *testing.T, h Harness) {
	ctx := context.Background()
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	hdr := http.Header{
		"Set-Cookie":   {"a=1; Path=/", "b=2; HttpOnly", "a=3"},
		"Content-Type": {"application/octet-stream"},
		"X-Empty":      {""},
		"X-Utf8":       {"grüße"},
	}
	cases := map[string]*cache.Response{
		"binary-multivalue": {Status: 200, Header: hdr, Body: body, BodySize: int64(len(body))},
		"empty":             {Status: 204},
		"no-header":         {Status: 404, Body: []byte{0, 0xff, '\n'}, BodySize: 3},
	}
	for name, want := range cases {
		key := Key(t, name)
		tok := claim(t, h.Store, key, "fp")
		if err := h.Store.Complete(ctx, key, tok, &cache.Record{State: cache.StateCompleted, Response: want}, ttl); err != nil {
			t.Fatalf("%s: Complete: %v", name, err)
		}
		got := mustLoad(t, h.Store, key).Response
		if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || got.BodySize != want.BodySize {
			t.Fatalf("%s: got status %d body %d bytes (size %d), want %d, %d bytes (size %d)",
				name, got.Status, len(got.Body), got.BodySize, want.Status, len(want.Body), want.BodySize)
		}
		if len(want.Header) == 0 {
			if len(got.Header) != 0 {
				t.Fatalf("%s: header = %v, want none", name, got.Header)
			}
		} else if !reflect.DeepEqual(got.Header, want.Header) {
			t.Fatalf("%s: header = %v, want %v", name, got.Header, want.Header)
		}
	}
}

func testOversizeMarker(t *testing.T, h Harness) {
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	rec := &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 200, Oversize: true, BodySize: 50 << 20}}
	if err := h.Store.Complete(context.Background(), key, tok, rec, ttl); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := mustLoad(t, h.Store, key).Response
	if !got.Oversize || got.BodySize != 50<<20 || len(got.Body) != 0 {
		t.Fatalf("response = %+v, want oversize marker", got)
	}
}

func testReleaseFreesKey(t *testing.T, h Harness) {
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	if err := h.Store.Release(context.Background(), key, tok); err != nil {
		t.Fatalf("Release: %v", err)
	}
	claim(t, h.Store, key, "fp2") // free again
	rec := mustLoad(t, h.Store, key)
	if rec.Fingerprint != "fp2" {
		t.Fatalf("fingerprint = %q, want fp2 (the new claim)", rec.Fingerprint)
	}
}

func testCompletedRecordExpires(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, tok, completed(200, "ok"), ttl); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	h.Clock.Advance(ttl - time.Second)
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateCompleted {
		t.Fatalf("record gone before its TTL: %+v", rec)
	}
	h.Clock.Advance(2 * time.Second)
	if _, err := h.Store.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get after TTL: err = %v, want ErrNotFound", err)
	}
	claim(t, h.Store, key, "fp") // claimable again
}

func testGetAndDelete(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	if _, err := h.Store.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get missing: err = %v, want ErrNotFound", err)
	}
	if err := h.Store.Delete(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Delete missing: err = %v, want ErrNotFound", err)
	}
	tok := claim(t, h.Store, key, "fp")
	rec, err := h.Store.Get(ctx, key)
	if err != nil || rec.State != cache.StateInFlight || rec.ExpiresAt.IsZero() {
		t.Fatalf("Get in flight: rec=%+v err=%v", rec, err)
	}
	if err := h.Store.Delete(ctx, key); err != nil {
		t.Fatalf("Delete in flight: %v", err)
	}
	// The key is free: another claim may run it; a claim that comes first fences
	// the deleted lock's holder out.
	tok2 := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, tok, completed(200, "x"), ttl); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Complete after Delete and a new claim: err = %v, want ErrClaimLost", err)
	}
	if err := h.Store.Release(ctx, key, tok2); err != nil {
		t.Fatal(err)
	}
	tok = claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, tok, completed(202, "done"), ttl); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec, err = h.Store.Get(ctx, key)
	if err != nil || rec.State != cache.StateCompleted || rec.Response.Status != 202 {
		t.Fatalf("Get completed: rec=%+v err=%v", rec, err)
	}
	if err := h.Store.Delete(ctx, key); err != nil {
		t.Fatalf("Delete completed: %v", err)
	}
	if _, err := h.Store.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get after Delete: err = %v, want ErrNotFound", err)
	}
}

func testKeysAreIndependent(t *testing.T, h Harness) {
	ctx := context.Background()
	a, b := Key(t, "a"), Key(t, "b")
	ta := claim(t, h.Store, a, "fa")
	tb := claim(t, h.Store, b, "fb")
	if err := h.Store.Complete(ctx, a, tb, completed(200, "x"), ttl); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("b's token completed a: err = %v", err)
	}
	if err := h.Store.Complete(ctx, a, ta, completed(200, "a"), ttl); err != nil {
		t.Fatalf("Complete a: %v", err)
	}
	if err := h.Store.Release(ctx, b, tb); err != nil {
		t.Fatalf("Release b: %v", err)
	}
	if got := mustLoad(t, h.Store, a).Response; string(got.Body) != "a" {
		t.Fatalf("a's body = %q", got.Body)
	}
}

func testPing(t *testing.T, h Harness) {
	if err := h.Store.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// testTraceContextKept: the first execution's trace context is kept with the claim
// (Record.Trace while in flight, to claims and Get alike) and with the response
// once completed; a claim without one has none.
func testTraceContextKept(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	trace := []byte("\x00\x01trace-id-0123456\x00span-id\x01")
	tok := Token()
	if _, loaded, err := h.Store.ClaimOrGet(ctx, key, cache.Claim{Token: tok, Fingerprint: "fp", Duration: lease, Trace: trace}); err != nil || loaded {
		t.Fatalf("ClaimOrGet: loaded=%v err=%v", loaded, err)
	}
	if rec := mustLoad(t, h.Store, key); string(rec.Trace) != string(trace) || rec.Response != nil {
		t.Fatalf("in flight: Trace %q Response %+v, want %q and none", rec.Trace, rec.Response, trace)
	}
	if rec, err := h.Store.Get(ctx, key); err != nil || string(rec.Trace) != string(trace) {
		t.Fatalf("Get in flight: %+v %v", rec, err)
	}
	done := completed(201, "created")
	done.Response.Trace = trace
	if err := h.Store.Complete(ctx, key, tok, done, ttl); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec := mustLoad(t, h.Store, key)
	if rec.State != cache.StateCompleted || string(rec.Response.Trace) != string(trace) || string(rec.Response.Body) != "created" {
		t.Fatalf("completed: %+v %+v", rec, rec.Response)
	}
	plain := Key(t, "plain")
	claim(t, h.Store, plain, "fp")
	if rec := mustLoad(t, h.Store, plain); rec.Trace != nil {
		t.Fatalf("a lock without a trace context has %q", rec.Trace)
	}
}
