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
		{"WrongTokenFenced", testWrongTokenFenced},
		{"LapsedLeaseFenced", testLapsedLeaseFenced},
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

// Token returns a fresh random lock token.
func Token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func claim(t *testing.T, s cache.Store, key, fp string) string {
	t.Helper()
	tok := Token()
	rec, loaded, err := s.LockOrGet(context.Background(), key, cache.Lock{Token: tok, Fingerprint: fp, Lease: lease})
	if err != nil {
		t.Fatalf("LockOrGet(%s): %v", key, err)
	}
	if loaded {
		t.Fatalf("LockOrGet(%s): key already held: %+v", key, rec)
	}
	return tok
}

func mustLoad(t *testing.T, s cache.Store, key string) *cache.Record {
	t.Helper()
	rec, loaded, err := s.LockOrGet(context.Background(), key, cache.Lock{Token: Token(), Fingerprint: "other", Lease: lease})
	if err != nil {
		t.Fatalf("LockOrGet(%s): %v", key, err)
	}
	if !loaded || rec == nil {
		t.Fatalf("LockOrGet(%s): claimed a key that should be held (loaded=%v rec=%v)", key, loaded, rec)
	}
	return rec
}

func completed(status int, body string) *cache.Record {
	return &cache.Record{
		State:    cache.StateCompleted,
		Response: &cache.Response{Status: status, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte(body), BodySize: int64(len(body))},
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

func testWrongTokenFenced(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	wrong := Token()
	if err := h.Store.Complete(ctx, key, wrong, completed(200, "x"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Complete with wrong token: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, key, wrong); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Release with wrong token: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Extend(ctx, key, wrong, lease); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Extend with wrong token: err = %v, want ErrLockLost", err)
	}
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight {
		t.Fatalf("wrong-token writes changed the record: %+v", rec)
	}
	if err := h.Store.Complete(ctx, key, tok, completed(200, "ok"), ttl); err != nil {
		t.Fatalf("Complete with right token: %v", err)
	}
	// Operations on a key nobody holds are fenced too.
	missing := Key(t, "missing")
	if err := h.Store.Complete(ctx, missing, tok, completed(200, "x"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Complete on missing key: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Extend(ctx, missing, tok, lease); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Extend on missing key: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, missing, tok); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Release on missing key: err = %v, want ErrLockLost", err)
	}
}

func testLapsedLeaseFenced(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	old := claim(t, h.Store, key, "fp")
	h.Clock.Advance(lease + time.Second)

	// The lapsed holder cannot extend or complete, even before anyone else claims.
	if err := h.Store.Extend(ctx, key, old, lease); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Extend after lapse: err = %v, want ErrLockLost", err)
	}
	newer := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, old, completed(200, "stale"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("stale Complete: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, key, old); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("stale Release: err = %v, want ErrLockLost", err)
	}
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight {
		t.Fatalf("stale writes touched the newer lock: %+v", rec)
	}
	if err := h.Store.Complete(ctx, key, newer, completed(200, "fresh"), ttl); err != nil {
		t.Fatalf("newer Complete: %v", err)
	}
	if got := mustLoad(t, h.Store, key).Response; string(got.Body) != "fresh" {
		t.Fatalf("body = %q, want fresh", got.Body)
	}
}

func testExtendKeepsLock(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	for i := 0; i < 3; i++ {
		h.Clock.Advance(lease / 2)
		if err := h.Store.Extend(ctx, key, tok, lease); err != nil {
			t.Fatalf("Extend %d: %v", i, err)
		}
	}
	// 1.5 leases have passed since the claim; the lock still holds.
	if rec := mustLoad(t, h.Store, key); rec.State != cache.StateInFlight {
		t.Fatalf("state = %v, want in_flight", rec.State)
	}
	if err := h.Store.Complete(ctx, key, tok, completed(200, "ok"), ttl); err != nil {
		t.Fatalf("Complete after extensions: %v", err)
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

func testNoWritesAfterComplete(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, tok, completed(200, "first"), ttl); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := h.Store.Complete(ctx, key, tok, completed(200, "second"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("second Complete: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, key, tok); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Release after Complete: err = %v, want ErrLockLost", err)
	}
	if err := h.Store.Extend(ctx, key, tok, lease); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Extend after Complete: err = %v, want ErrLockLost", err)
	}
	if got := mustLoad(t, h.Store, key).Response; string(got.Body) != "first" {
		t.Fatalf("body = %q, want first", got.Body)
	}
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
	// The deleted lock's holder is fenced out; the key runs again.
	if err := h.Store.Complete(ctx, key, tok, completed(200, "x"), ttl); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Complete after Delete: err = %v, want ErrLockLost", err)
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
	if err := h.Store.Complete(ctx, a, tb, completed(200, "x"), ttl); !errors.Is(err, cache.ErrLockLost) {
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

// raceClaim has n goroutines claim key at once and returns how many won.
func raceClaim(t *testing.T, s cache.Store, key string, n int) (winners int, winToken string) {
	t.Helper()
	type result struct {
		tok    string
		loaded bool
		err    error
	}
	results := make(chan result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := Token()
			<-start
			_, loaded, err := s.LockOrGet(context.Background(), key, cache.Lock{Token: tok, Fingerprint: "fp", Lease: lease})
			results <- result{tok, loaded, err}
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil {
			t.Errorf("LockOrGet: %v", r.err)
			continue
		}
		if !r.loaded {
			winners++
			winToken = r.tok
		}
	}
	return winners, winToken
}

func testRaceOneWinner(t *testing.T, h Harness) {
	const n = 100
	for round := 0; round < 5; round++ {
		key := Key(t, fmt.Sprint(round))
		if winners, _ := raceClaim(t, h.Store, key, n); winners != 1 {
			t.Fatalf("round %d: %d of %d goroutines claimed the key, want exactly 1", round, winners, n)
		}
	}
}

func testRaceAfterRelease(t *testing.T, h Harness) {
	key := Key(t, "k")
	const n = 50
	for round := 0; round < 3; round++ {
		winners, tok := raceClaim(t, h.Store, key, n)
		if winners != 1 {
			t.Fatalf("round %d: %d winners, want 1", round, winners)
		}
		if err := h.Store.Release(context.Background(), key, tok); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
	}
}

func testPing(t *testing.T, h Harness) {
	if err := h.Store.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func notifier(t *testing.T, h Harness) cache.Notifier {
	n, ok := h.Store.(cache.Notifier)
	if !ok {
		t.Skip("store does not implement cache.Notifier")
	}
	return n
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("no notification within 5s after %s", what)
	}
}

func testNotifyOnComplete(t *testing.T, h Harness) {
	n := notifier(t, h)
	key, other := Key(t, "k"), Key(t, "other")
	tok := claim(t, h.Store, key, "fp")
	otherTok := claim(t, h.Store, other, "fp")
	changed, cancel := n.Subscribe(key)
	defer cancel()
	_, cancelIdle := n.Subscribe(key) // a second waiter that gives up must not disturb the first
	cancelIdle()
	if err := h.Store.Complete(context.Background(), other, otherTok, completed(200, "x"), ttl); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Complete(context.Background(), key, tok, completed(200, "x"), ttl); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, changed, "Complete")
}

func testNotifyOnRelease(t *testing.T, h Harness) {
	n := notifier(t, h)
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	changed, cancel := n.Subscribe(key)
	defer cancel()
	if err := h.Store.Release(context.Background(), key, tok); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, changed, "Release")
	tok = claim(t, h.Store, key, "fp")
	changed, cancel2 := n.Subscribe(key)
	defer cancel2()
	if err := h.Store.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, changed, "Delete")
	_ = tok
}
