package localcache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

func rec(body string) *cache.Record {
	return &cache.Record{State: cache.StateCompleted, Fingerprint: "f", Response: &cache.Response{Status: 200, Body: []byte(body)}}
}

// trusted returns a cache whose pings come straight back, as from a healthy
// subscription.
func trusted(t *testing.T, max int64) *Cache {
	c := New(max, "me")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Ping(ctx, func(_ context.Context, p string) error { c.IsPing(p); return nil })
	}()
	t.Cleanup(func() { cancel(); <-done })
	await(c)
	return c
}

// await waits until c is trusted, asking for pings as a claim of a key it
// holds does.
func await(c *Cache) {
	for !c.trusted() {
		c.want()
		time.Sleep(time.Millisecond)
	}
}

func keep(c *Cache, key string, r *cache.Record) {
	c.End(c.Begin(key), r, time.Hour)
}

func TestReadsSpoiledByAnnouncementOrFlush(t *testing.T) {
	c := trusted(t, 1<<20)
	r := c.Begin("k")
	c.Invalidate("k")
	c.End(r, rec("old"), time.Hour)
	if _, ok := c.Get("k"); ok {
		t.Fatal("kept a read that an announcement overtook")
	}
	r = c.Begin("k")
	c.Flush()
	c.End(r, rec("old"), time.Hour)
	if c.Len() != 0 {
		t.Fatal("kept a read that a flush overtook")
	}
	await(c) // a flush distrusts until a new ping comes back
	keep(c, "k", rec("new"))
	if got, ok := c.Get("k"); !ok || string(got.Response.Body) != "new" {
		t.Fatalf("Get = %v, %v", got, ok)
	}
}

func TestOnlyCompletedKnownOutcomes(t *testing.T) {
	c := trusted(t, 1<<20)
	unknown := rec("u")
	unknown.Response.Unknown = true
	keep(c, "unknown", unknown)
	keep(c, "inflight", &cache.Record{State: cache.StateInFlight, Fingerprint: "f"})
	c.End(c.Begin("expired"), rec("x"), 0)
	if c.Len() != 0 {
		t.Fatalf("kept %d records, want none", c.Len())
	}
}

func TestUntrustedAnswersNothing(t *testing.T) {
	c := New(1<<20, "me") // no pings: the subscription is not known to work
	keep(c, "k", rec("x"))
	if _, ok := c.Get("k"); ok {
		t.Fatal("answered without a ping back")
	}
	c.IsPing(pingPrefix + "other 1") // another instance's ping proves nothing
	if _, ok := c.Get("k"); ok {
		t.Fatal("answered on another instance's ping")
	}
	if !c.IsPing(pingPrefix+"me x") || c.IsPing("idem:"+pingPrefix) {
		t.Fatal("IsPing misreads payloads")
	}
}

func TestBoundInBytes(t *testing.T) {
	c := trusted(t, 64<<10)
	body := strings.Repeat("b", 1000)
	for i := 0; i < 200; i++ {
		keep(c, fmt.Sprint("k", i), rec(body))
	}
	if c.ring.live > c.max || c.Len() == 0 || c.Len() > 64 {
		t.Fatalf("%d records, %d bytes, bound %d", c.Len(), c.ring.live, c.max)
	}
	if _, ok := c.Get("k199"); !ok {
		t.Fatal("the most recent record was evicted")
	}
	keep(c, "huge", rec(strings.Repeat("h", 16<<10)))
	if _, ok := c.Get("huge"); ok {
		t.Fatal("kept a record over an eighth of the bound")
	}
	// A record too large to keep leaves no older one of its key answered.
	keep(c, "k199", rec(strings.Repeat("h", 16<<10)))
	if got, ok := c.Get("k199"); ok {
		t.Fatalf("a refused record left the older one answered: %d bytes", len(got.Response.Body))
	}
}

// The default size: a sixteenth of GOMEMLIMIT, else of the cgroup's limit,
// within the floor and the cap; without a budget, DefaultUnbounded.
func TestDefaultSize(t *testing.T) {
	const unset = math.MaxInt64 // debug.SetMemoryLimit's answer when GOMEMLIMIT is not set
	for _, c := range []struct {
		memLimit, cgroup, want int64
		from                   string
	}{
		{unset, 0, DefaultUnbounded, "no memory limit"},
		{unset, 1 << 30, 64 << 20, "cgroup memory limit 1024MiB"},
		{512 << 20, 1 << 30, 32 << 20, "GOMEMLIMIT 512MiB"},
		{64 << 20, 0, DefaultFloor, "GOMEMLIMIT"},
		{unset, 64 << 30, DefaultCap, "cgroup"},
	} {
		got, from := defaultSize(c.memLimit, c.cgroup)
		if got != c.want || !strings.Contains(from, c.from) {
			t.Errorf("defaultSize(%d, %d) = %d, %q; want %d, %q", c.memLimit, c.cgroup, got, from, c.want, c.from)
		}
	}
}

// Stats counts what the metrics show: hits and misses of claims, records
// dropped by announcements, flushes, and time not trusted.
func TestStats(t *testing.T) {
	c := trusted(t, 1<<20)
	claim := func(key string) {
		t.Helper()
		if _, _, err := c.Claim(key, func() (*cache.Record, bool, time.Duration, error) { return rec("x"), true, time.Hour, nil }); err != nil {
			t.Fatal(err)
		}
	}
	claim("a") // a miss, kept
	claim("a") // a hit
	claim("a")
	c.Invalidate("a")
	c.Invalidate("never-held") // drops nothing
	st := c.Stats()
	if st.Hits != 2 || st.Misses != 1 || st.Invalidations != 1 || st.Records != 0 || st.MaxBytes != 1<<20 {
		t.Fatalf("after 1 miss, 2 hits, 1 drop: %+v", st)
	}
	claim("b")
	if st := c.Stats(); st.Records != 1 || st.Bytes <= 0 {
		t.Fatalf("holding b: %+v", st)
	}
	c.Flush()
	if st := c.Stats(); st.Flushes != 1 || st.Records != 0 || st.Bytes != 0 {
		t.Fatalf("after a flush: %+v", st)
	}
	// An untrusted cache counts the time at each ping while claims consult
	// it: one that never hears its pings back.
	u := New(1<<20, "deaf")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); u.Ping(ctx, func(context.Context, string) error { return nil }) }()
	keep(u, "k", rec("x"))
	for end := time.Now().Add(3 * pingEvery); time.Now().Before(end); time.Sleep(time.Millisecond) {
		u.Get("k")
	}
	cancel()
	<-done
	if st := u.Stats(); st.Untrusted < pingEvery {
		t.Fatalf("untrusted for %v after %v without a ping back", st.Untrusted, 3*pingEvery)
	}
}

// Forget and Settle whose context ends before Window has passed say so.
func TestSettleCutShortReturnsContextError(t *testing.T) {
	c := trusted(t, 1<<20)
	keep(c, "k", rec("x"))
	ctx, cancel := context.WithTimeout(context.Background(), Window/4)
	defer cancel()
	if err := c.Forget(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Forget cut short: %v, want context.DeadlineExceeded", err)
	}
	if _, ok := c.Get("k"); ok {
		t.Fatal("Forget cut short kept the key")
	}
	if err := Settle(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Settle on an ended context: %v", err)
	}
	var nilCache *Cache
	if err := nilCache.Forget(context.Background(), "k"); err != nil {
		t.Fatalf("Forget over the whole window: %v", err)
	}
}

// A cache pings only while claims of keys it holds consult it, about once
// every renewAfter:
// idle, it publishes nothing; the next claim wakes it, and it is trusted
// again once that ping comes back.
func TestPingsOnlyWhileUsed(t *testing.T) {
	c := New(1<<20, "me")
	pings := make(chan string, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Ping(ctx, func(_ context.Context, p string) error { pings <- p; c.IsPing(p); return nil })
	}()
	defer func() { cancel(); <-done }()
	time.Sleep(2 * Window)
	if n := len(pings); n != 0 {
		t.Fatalf("an unused cache published %d pings", n)
	}
	keep(c, "k", rec("x"))
	if c.trusted() {
		t.Fatal("trusted before any ping")
	}
	for _, ok := c.Get("k"); !ok; _, ok = c.Get("k") {
		time.Sleep(time.Millisecond)
	}
	// In use for 4 Windows: about one ping every renewAfter, and trusted
	// throughout.
	for len(pings) > 0 {
		<-pings
	}
	start := time.Now()
	for time.Since(start) < 4*Window {
		if _, ok := c.Get("k"); !ok {
			t.Fatalf("distrusted after %v in use, pinging", time.Since(start))
		}
		time.Sleep(time.Millisecond)
	}
	if n, most := len(pings), int(4*Window/renewAfter)+1; n > most || n < most/2 {
		t.Fatalf("%d pings in %v of use, want about %d", n, 4*Window, most)
	}
	// Unused again: the pings stop, and trust lapses.
	time.Sleep(pingEvery + 10*time.Millisecond)
	for len(pings) > 0 {
		<-pings
	}
	time.Sleep(2 * Window)
	if n := len(pings); n != 0 {
		t.Fatalf("%d pings after the claims stopped", n)
	}
	if c.trusted() {
		t.Fatal("trusted with no ping sent for 2 Windows")
	}
}

// A claim of a key the cache does not hold asks for no ping: first
// executions, most of the traffic, cost the cache nothing.
func TestMissOfAbsentKeyPingsNothing(t *testing.T) {
	c := New(1<<20, "me")
	pings := make(chan string, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Ping(ctx, func(_ context.Context, p string) error { pings <- p; c.IsPing(p); return nil })
	}()
	defer func() { cancel(); <-done }()
	for end := time.Now().Add(2 * Window); time.Now().Before(end); time.Sleep(time.Millisecond) {
		c.Get(fmt.Sprint("absent", time.Now().UnixNano()))
	}
	if n := len(pings); n != 0 {
		t.Fatalf("claims of absent keys sent %d pings", n)
	}
}

// A store write carries a ping when one is due, at most one every
// pingEvery, counting the pinger's; once it comes back the cache is
// trusted, and a claim that came first waits for it.
func TestCarriedPing(t *testing.T) {
	c := New(1<<20, "me")
	p := c.Carry()
	if !strings.HasPrefix(p, pingPrefix+"me ") {
		t.Fatalf("Carry = %q, want a ping", p)
	}
	if again := c.Carry(); again != "" {
		t.Fatalf("a second Carry within pingEvery = %q", again)
	}
	keep(c, "k", rec("x"))
	go func() {
		time.Sleep(2 * time.Millisecond)
		c.IsPing(p)
	}()
	if _, ok := c.Get("k"); !ok { // waits for the carried ping
		t.Fatal("a claim with a ping out did not wait for it")
	}
	var nilCache *Cache
	if nilCache.Carry() != "" {
		t.Fatal("a nil cache carried a ping")
	}
	// No ping out: an untrusted cache answers nothing, at once.
	c.Flush()
	keep(c, "k", rec("x"))
	start := time.Now()
	if _, ok := c.Get("k"); ok || time.Since(start) > pingWait/2 {
		t.Fatalf("untrusted, no ping out: answered %v after %v", ok, time.Since(start))
	}
	// A ping out that never comes back: the claim waits pingWait, no more.
	time.Sleep(pingEvery)
	if c.Carry() == "" {
		t.Fatal("no ping due after pingEvery")
	}
	start = time.Now()
	if _, ok := c.Get("k"); ok || time.Since(start) < pingWait || time.Since(start) > Window {
		t.Fatalf("ping lost: answered %v after %v", ok, time.Since(start))
	}
}

// A record a Complete put in obeys what a read's does: an announcement
// while the write was out keeps it out (a flush too: TestReadsSpoiledByAnnouncementOrFlush),
// and it expires at the time the
// write was sent plus the store's TTL.
func TestCompletedRecordPutIn(t *testing.T) {
	c := trusted(t, 1<<20)
	w := c.Begin("k") // the Complete is sent
	c.Invalidate("k") // a Delete from another instance, announced meanwhile
	c.End(w, rec("x"), time.Hour)
	if _, ok := c.Get("k"); ok {
		t.Fatal("kept a write an announcement overtook")
	}
	w = c.Begin("k")
	time.Sleep(5 * time.Millisecond) // the write's round trip
	c.End(w, rec("x"), time.Hour)
	if _, ok := c.Get("k"); !ok {
		t.Fatalf("lost a fresh write (trusted %v, held %d)", c.trusted(), c.Len())
	}
	c.mu.Lock()
	at, _ := c.ring.find("k")
	expires := c.ring.expires(at)
	c.mu.Unlock()
	if expires != w.sent+int64(time.Hour) {
		t.Fatalf("expires %v after the write was sent, want the TTL, %v", time.Duration(expires-w.sent), time.Hour)
	}
}

// A kept record comes back whole, as the caller's own (a caller that changes
// it changes nothing kept), whether End kept it decoded or EndEncoded kept a
// Complete's encoded response; a notKept EndEncoded keeps nothing.
func TestKeptRecordsComeBackWholeAndOwn(t *testing.T) {
	c := trusted(t, 1<<20)
	created := time.UnixMilli(1_700_000_000_000)
	resp := &cache.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/c/1"}},
		Trailer: map[string][]string{"X-Sum": {"9"}}, Body: []byte(`{"id":1}`), BodySize: 8, Trace: []byte("tr"), Info: "info"}
	keep(c, "decoded", &cache.Record{State: cache.StateCompleted, Fingerprint: "fp", CreatedAt: created, ExpiresAt: created.Add(time.Hour), Response: resp})
	blob, err := cache.EncodeResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	c.EndEncoded(c.Begin("encoded"), "fp", created, created.Add(time.Hour), blob, false, time.Hour)
	c.EndEncoded(c.Begin("failed"), "fp", created, created.Add(time.Hour), blob, true, time.Hour)
	if _, ok := c.Get("failed"); ok {
		t.Fatal("a notKept EndEncoded kept its record")
	}
	for _, key := range []string{"decoded", "encoded"} {
		for i := range 2 {
			got, ok := c.Get(key)
			if !ok {
				t.Fatalf("%s: not kept", key)
			}
			r := got.Response
			if got.State != cache.StateCompleted || got.Fingerprint != "fp" || !got.CreatedAt.Equal(created) || !got.ExpiresAt.Equal(created.Add(time.Hour)) ||
				r.Status != 201 || r.Header["Content-Type"][0] != "application/json" || r.Header["Location"][0] != "/c/1" ||
				r.Trailer["X-Sum"][0] != "9" || string(r.Body) != `{"id":1}` || r.BodySize != 8 || string(r.Trace) != "tr" || r.Info != "info" {
				t.Fatalf("%s, read %d: %+v / %+v", key, i, got, r)
			}
			// The caller's own: change everything; the next read is whole.
			r.Header["Content-Type"][0], r.Body[0], r.Trace[0] = "x", 'x', 'x'
			r.Header["X-New"] = []string{"y"}
			got.Fingerprint = "changed"
		}
	}
}
