package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	const n = 200
	release := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(201)
		_, _ = w.Write([]byte("charged"))
	}}
	h := newHandler(t, newMem(t)).Wrap(c)

	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- serve(h, req{Key: "same", Body: "x"}).Code
		}()
	}
	// Every duplicate but the one executing answers 409 while it is blocked.
	got := map[int]int{}
	for i := 0; i < n-1; i++ {
		got[<-codes]++
	}
	close(release)
	wg.Wait()
	got[<-codes]++
	if c.Calls.Load() != 1 || got[201] != 1 || got[409] != n-1 {
		t.Fatalf("calls = %d, statuses = %v; want 1 call, one 201 and %d 409s", c.Calls.Load(), got, n-1)
	}
	// And after completion, concurrent duplicates all replay.
	var replayed sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		replayed.Add(1)
		go func() {
			defer replayed.Done()
			w := serve(h, req{Key: "same", Body: "x"})
			if w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "charged" {
				errs <- fmt.Sprintf("%d %q", w.Code, w.Body)
			}
		}()
	}
	replayed.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("replay: %s", e)
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d after replays", c.Calls.Load())
	}
}

func TestMismatchWinsOverInFlight(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-release }}
	h := newHandler(t, newMem(t)).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "k", Body: "a"}) }()
	<-started
	if w := serve(h, req{Key: "k", Body: "b"}); w.Code != 422 {
		t.Fatalf("different body while in flight: %d, want 422", w.Code)
	}
	w := serve(h, req{Key: "k", Body: "a"})
	if w.Code != 409 {
		t.Fatalf("same request while in flight: %d, want 409", w.Code)
	}
	checkProblem(t, w.Header(), w.Body.Bytes(), 409, middleware.ProblemInFlight)
	close(release)
	<-done
}

// The lease is renewed while next runs: the fake clock moves well past the lease,
// but only in steps shorter than it, each after a renewal.
func TestLeaseRenewalKeepsSlowRequestLocked(t *testing.T) {
	clk := cachetest.NewClock()
	store := &flaky{Store: newMem(t, memstore.WithClock(clk.Now)), extends: make(chan struct{}, 1)}
	const lease = 30 * time.Millisecond
	release := make(chan struct{})
	started := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-release; w.WriteHeader(200) }}
	h := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = lease }).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "slow"}) }()
	<-started
	for i := 0; i < 6; i++ { // 6 × 20ms = 4 leases of fake time
		select {
		case <-store.extends:
		case <-time.After(5 * time.Second):
			t.Fatalf("no lease renewal after %d steps", i)
		}
		clk.Advance(2 * lease / 3)
		if w := serve(h, req{Key: "slow"}); w.Code != 409 {
			t.Fatalf("step %d: duplicate got %d, want 409 (lock lost)", i, w.Code)
		}
	}
	close(release)
	<-done
	if w := serve(h, req{Key: "slow"}); w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after completion: %d replayed=%q", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1", c.Calls.Load())
	}
}

// A holder whose lease lapsed (no renewal got through) cannot overwrite the newer
// holder's record.
func TestLapsedLeaseOldHolderCannotOverwrite(t *testing.T) {
	clk := cachetest.NewClock()
	store := newMem(t, memstore.WithClock(clk.Now))
	var evs events
	releaseFirst := make(chan struct{})
	firstStarted := make(chan struct{})
	c := &counter{}
	c.Fn = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Which") == "first" {
			close(firstStarted)
			<-releaseFirst
		}
		w.WriteHeader(200)
		_, _ = w.Write([]byte(r.Header.Get("X-Which")))
	}
	// The lease is long in real time (no renewal fires during the test) and
	// lapses by moving the fake clock.
	h := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = time.Hour }, func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "k", Header: http.Header{"X-Which": {"first"}}}) }()
	<-firstStarted
	clk.Advance(2 * time.Hour)
	if w := serve(h, req{Key: "k", Header: http.Header{"X-Which": {"second"}}}); w.Code != 200 || w.Body.String() != "second" {
		t.Fatalf("second after lapse: %d %q", w.Code, w.Body)
	}
	close(releaseFirst)
	<-done
	if w := serve(h, req{Key: "k"}); w.Body.String() != "second" || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %q, want the newer holder's response", w.Body)
	}
	o := evs.Outcomes()
	if len(o) != 3 || o[0] != middleware.OutcomeStored || o[1] != middleware.OutcomeNotStored {
		t.Fatalf("outcomes %v: want the second stored, then the lapsed first not stored", o)
	}
	if evs.All()[1].Err == nil || !errors.Is(evs.All()[1].Err, cache.ErrLockLost) {
		t.Fatalf("lapsed holder's error = %v, want ErrLockLost", evs.All()[1].Err)
	}
}

func TestClientHangUpStillStores(t *testing.T) {
	store := newMem(t)
	started := make(chan struct{})
	release := make(chan struct{})
	ctxErr := make(chan error, 1)
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		ctxErr <- r.Context().Err()
		w.WriteHeader(201)
		_, _ = w.Write(bytes.Repeat([]byte("z"), 256<<10)) // more than socket buffers take
	}}
	var evs events
	srv := httptest.NewServer(newHandler(t, store, func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/pay", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", "hangup")
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(r)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel() // the client hangs up while the first request runs
	if err := <-errc; err == nil {
		t.Fatal("client request should have been cancelled")
	}
	close(release)
	if err := <-ctxErr; err != nil {
		t.Fatalf("next's context was cancelled by the hang-up: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "the response to be stored", func() bool { return len(evs.Outcomes()) == 1 })
	if o := evs.Outcomes(); o[0] != middleware.OutcomeStored {
		t.Fatalf("outcome %v, want stored", o)
	}
	r2, _ := http.NewRequest("POST", srv.URL+"/pay", strings.NewReader("x"))
	r2.Header.Set("Idempotency-Key", "hangup")
	resp, err := srv.Client().Do(r2)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || len(body) != 256<<10 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d, %d bytes, replayed=%q", resp.StatusCode, len(body), resp.Header.Get("Idempotent-Replayed"))
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1", c.Calls.Load())
	}
}

func TestErrorsAndPanicsRelease(t *testing.T) {
	store := newMem(t)
	h := newHandler(t, store)
	boom := errors.New("upstream unreachable")
	calls := 0
	failing := middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error { calls++; return boom })
	for i := 0; i < 2; i++ {
		if err := h.Handle(httptest.NewRecorder(), req{Key: "err"}.Build(), failing); !errors.Is(err, boom) {
			t.Fatalf("Handle returned %v, want next's error", err)
		}
	}
	if calls != 2 {
		t.Fatalf("error from next: calls = %d, want 2 (key released)", calls)
	}

	panicky := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { panic("kaboom") }}
	wrapped := h.Wrap(panicky)
	for i := 0; i < 2; i++ {
		func() {
			defer func() {
				if p := recover(); p != "kaboom" {
					t.Fatalf("panic not re-raised: %v", p)
				}
			}()
			serve(wrapped, req{Key: "panic"})
		}()
	}
	if panicky.Calls.Load() != 2 {
		t.Fatalf("panic: calls = %d, want 2 (key released)", panicky.Calls.Load())
	}
	// http.ErrAbortHandler after the answer started (a reverse proxy's upstream
	// body cut mid-stream) is an unknown outcome: the key is held, not released.
	abort := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200); panic(http.ErrAbortHandler) }}
	srv := httptest.NewServer(h.Wrap(abort))
	defer srv.Close()
	for i := 0; i < 2; i++ {
		r, _ := http.NewRequest("POST", srv.URL, nil)
		r.Header.Set("Idempotency-Key", "abort")
		if resp, err := srv.Client().Do(r); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	if abort.Calls.Load() != 1 {
		t.Fatalf("abort after writing: calls = %d, want 1 (held: the outcome is unknown)", abort.Calls.Load())
	}
}

func TestStoreFailure(t *testing.T) {
	store := &flaky{Store: newMem(t)}
	store.failLock.Store(true)
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	c := &counter{}
	closed := newHandler(t, store, func(s *middleware.Settings) { s.Logger = logger }).Wrap(c)
	w := serve(closed, req{Key: "secret-key-value", Header: http.Header{"Authorization": {"Bearer s3cr3t"}}})
	if w.Code != 503 || c.Calls.Load() != 0 {
		t.Fatalf("fail closed: %d, calls %d; want 503 and no call", w.Code, c.Calls.Load())
	}
	checkProblem(t, w.Header(), w.Body.Bytes(), 503, middleware.ProblemStoreUnavailable)
	if s := logs.String(); !strings.Contains(s, "store unavailable") || strings.Contains(s, "secret-key-value") || strings.Contains(s, "s3cr3t") {
		t.Fatalf("log must mention the failure and never the key or credentials: %s", s)
	}

	var evs events
	open := newHandler(t, store, func(s *middleware.Settings) { s.FailOpen = true }, func(s *middleware.Settings) { s.Logger = logger }, func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c)
	if w := serve(open, req{Key: "k"}); w.Code != 201 || c.Calls.Load() != 1 {
		t.Fatalf("fail open: %d, calls %d; want 201 and one call", w.Code, c.Calls.Load())
	}
	if o := evs.Outcomes(); len(o) != 1 || o[0] != middleware.OutcomeStoreError || evs.All()[0].Status != 201 {
		t.Fatalf("fail open events: %+v", evs.All())
	}

	// Complete failing after the execution (the store restarting): the lock still
	// holds the key, so a retry gets 409 and nothing runs twice; storing is retried
	// in the background, and once the store is back the retry is replayed.
	store.failLock.Store(false)
	store.failComplete.Store(true)
	calls := c.Calls.Load()
	core := newHandler(t, store, func(s *middleware.Settings) { s.Logger = logger })
	h := core.Wrap(c)
	serve(h, req{Key: "cf"})
	if w := serve(h, req{Key: "cf"}); w.Code != 409 {
		t.Fatalf("while the response is not stored yet: %d, want 409", w.Code)
	}
	store.failComplete.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := core.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if w := serve(h, req{Key: "cf"}); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" || c.Calls.Load() != calls+1 {
		t.Fatalf("after the store came back: %d replayed=%q calls=%d; want the stored replay", w.Code, w.Header().Get("Idempotent-Replayed"), c.Calls.Load()-calls)
	}
}

// A store outage longer than the lease no longer makes a second run: the
// finished response is kept and stored once the store answers, the lease having
// lapsed, because nobody claimed the key meanwhile. (It used to give up at the
// lease's end, and the retry ran again.)
func TestCompleteRetryOutlivesTheLease(t *testing.T) {
	store := &flaky{Store: newMem(t)}
	store.failComplete.Store(true)
	c := &counter{}
	core := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = 60 * time.Millisecond })
	h := core.Wrap(c)
	first := serve(h, req{Key: "k"})
	time.Sleep(200 * time.Millisecond) // the outage lasts over three leases
	store.failComplete.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := core.Wait(ctx); err != nil {
		t.Fatalf("the background completion did not finish: %v", err)
	}
	if w := serve(h, req{Key: "k"}); w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != first.Body.String() || c.Calls.Load() != 1 {
		t.Fatalf("retry after an outage past the lease: %d replayed=%q, %d runs; want the replay of the one run",
			w.Code, w.Header().Get("Idempotent-Replayed"), c.Calls.Load())
	}
}

// A pending completion that finds another request's claim on the free key keeps
// trying: that claim may be refused and undone (a Redis claim no replica
// acknowledged; found by the soak's failover phase, where the completion gave up
// and the key ran again), or released. It lands once the key is free.
func TestCompleteRetryOutlivesAnotherClaim(t *testing.T) {
	mem := newMem(t)
	store := &flaky{Store: mem}
	store.failComplete.Store(true)
	c := &counter{}
	core := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = 60 * time.Millisecond })
	h := core.Wrap(c)
	first := serve(h, req{Key: "k"})
	key := core.StoreKey(req{Key: "k"}.Build(), "k")
	time.Sleep(100 * time.Millisecond) // the outage outlasts the lease
	if _, loaded, err := mem.LockOrGet(context.Background(), key, cache.Lock{Token: "other", Fingerprint: "fp", Lease: time.Minute}); err != nil || loaded {
		t.Fatalf("another claim on the lapsed key: loaded=%v err=%v", loaded, err)
	}
	tries := store.completes.Load()
	store.failComplete.Store(false)
	testutil.Eventually(t, 5*time.Second, "the pending completion to meet the other claim", func() bool { return store.completes.Load() > tries })
	if err := mem.Release(context.Background(), key, "other"); err != nil { // refused and undone
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := core.Wait(ctx); err != nil {
		t.Fatalf("the background completion did not finish: %v", err)
	}
	if w := serve(h, req{Key: "k"}); w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != first.Body.String() || c.Calls.Load() != 1 {
		t.Fatalf("retry after the other claim was undone: %d replayed=%q, %d runs; want the replay of the one run",
			w.Code, w.Header().Get("Idempotent-Replayed"), c.Calls.Load())
	}
}

// The other claim may be gone by the time the pending completion reads the
// key: a free key is no reason to give up either (seen in the soak's waited
// failover round, with the first version of the fix above).
func TestCompleteRetryKeepsOnAFreedKey(t *testing.T) {
	store := &flaky{Store: newMem(t)}
	store.failComplete.Store(true)
	c := &counter{}
	core := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = 60 * time.Millisecond })
	h := core.Wrap(c)
	first := serve(h, req{Key: "k"})
	time.Sleep(100 * time.Millisecond) // the lease lapses: the key reads as free
	store.lockLostOnce.Store(true)
	store.failComplete.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := core.Wait(ctx); err != nil {
		t.Fatalf("the background completion did not finish: %v", err)
	}
	if w := serve(h, req{Key: "k"}); w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != first.Body.String() || c.Calls.Load() != 1 {
		t.Fatalf("retry: %d replayed=%q, %d runs; want the replay of the one run", w.Code, w.Header().Get("Idempotent-Replayed"), c.Calls.Load())
	}
}

// complete_retry bounds the background completion; past it the lock lapses and a
// retry runs again (the documented limit).
func TestCompleteRetryGivesUpAfterItsBound(t *testing.T) {
	store := &flaky{Store: newMem(t)}
	store.failComplete.Store(true)
	c := &counter{}
	core := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = 60 * time.Millisecond }, func(s *middleware.Settings) { s.CompleteRetry = 300 * time.Millisecond })
	h := core.Wrap(c)
	serve(h, req{Key: "k"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := core.Wait(ctx); err != nil {
		t.Fatalf("the background completion did not give up: %v", err)
	}
	store.failComplete.Store(false)
	testutil.Eventually(t, 5*time.Second, "the lease to lapse", func() bool { return serve(h, req{Key: "k"}).Code == 201 })
	if c.Calls.Load() != 2 {
		t.Fatalf("calls = %d, want 2", c.Calls.Load())
	}
}

func TestReplayFidelity(t *testing.T) {
	body := make([]byte, 4<<20)
	for i := range body {
		body[i] = byte(i*31 + i>>8)
	}
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Set-Cookie", "a=1; Path=/")
		h.Add("Set-Cookie", "b=2; HttpOnly")
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Secret-Internal", "never stored")
		h.Set("Connection", "X-Hop")
		h.Set("X-Hop", "hop-by-hop")
		h.Set("Keep-Alive", "timeout=5")
		w.WriteHeader(202)
		for off := 0; off < len(body); off += 64 << 10 { // streamed in chunks with flushes
			_, _ = w.Write(body[off : off+64<<10])
			http.NewResponseController(w).Flush()
		}
	}}
	srv := httptest.NewServer(newHandler(t, newMem(t), func(s *middleware.Settings) { s.IgnoreHeaders = []string{"X-Secret-Internal"} }).Wrap(c))
	defer srv.Close()
	do := func() (*http.Response, []byte) {
		r, _ := http.NewRequest("POST", srv.URL, strings.NewReader("p"))
		r.Header.Set("Idempotency-Key", "fidelity")
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	first, firstBody := do()
	if first.StatusCode != 202 || !bytes.Equal(firstBody, body) || first.ContentLength != -1 {
		t.Fatalf("first: %d, %d bytes, length %d", first.StatusCode, len(firstBody), first.ContentLength)
	}
	resp, got := do()
	if resp.StatusCode != 202 || !bytes.Equal(got, body) {
		t.Fatalf("replay: %d, %d bytes equal=%v", resp.StatusCode, len(got), bytes.Equal(got, body))
	}
	if resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) != 0 {
		t.Fatalf("replay framing: Content-Length %d, Transfer-Encoding %v", resp.ContentLength, resp.TransferEncoding)
	}
	h := resp.Header
	if sc := h.Values("Set-Cookie"); len(sc) != 2 || sc[0] != "a=1; Path=/" || sc[1] != "b=2; HttpOnly" {
		t.Fatalf("Set-Cookie = %q", sc)
	}
	if h.Get("Content-Type") != "application/octet-stream" || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("headers: %v", h)
	}
	for _, gone := range []string{"X-Secret-Internal", "X-Hop", "Keep-Alive"} {
		if h.Get(gone) != "" {
			t.Fatalf("%s was replayed: %v", gone, h)
		}
	}
}

func TestStreamingFlushReachesClient(t *testing.T) {
	second := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = w.Write([]byte("first;"))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush through the recorder: %v", err)
		}
		<-second
		_, _ = w.Write([]byte("second"))
	}}
	srv := httptest.NewServer(newHandler(t, newMem(t)).Wrap(c))
	defer srv.Close()
	r, _ := http.NewRequest("POST", srv.URL, nil)
	r.Header.Set("Idempotency-Key", "stream")
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first;" {
		t.Fatalf("first chunk before the handler finished: %q %v", buf, err)
	}
	close(second)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(rest) != "second" {
		t.Fatalf("rest = %q", rest)
	}
	w := serve(newHandlerSharing(t, srv), req{Key: "stream"})
	_ = w
}

// newHandlerSharing re-requests through the server (helper for readability).
func newHandlerSharing(t *testing.T, srv *httptest.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2, _ := http.NewRequest(r.Method, srv.URL, nil)
		r2.Header = r.Header
		resp, err := srv.Client().Do(r2)
		if err != nil {
			t.Errorf("replay request: %v", err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "first;second" || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay of streamed response: %q replayed=%q", b, resp.Header.Get("Idempotent-Replayed"))
		}
	})
}

// Behind httputil.ReverseProxy, which streams chunked bodies and flushes, the whole
// body is captured (a peer stored nothing above 2 KB here).
func TestCaptureBehindReverseProxy(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, no Content-Length
	upstreamCalls := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls++
		w.Header().Set("Content-Type", "application/json")
		for off := 0; off < len(payload); off += 3000 {
			_, _ = w.Write(payload[off:min(off+3000, len(payload))])
			http.NewResponseController(w).Flush()
		}
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
	srv := httptest.NewServer(newHandler(t, newMem(t)).Wrap(rp))
	defer srv.Close()
	for i := 0; i < 2; i++ {
		r, _ := http.NewRequest("POST", srv.URL+"/x", strings.NewReader(`{"a":1}`))
		r.Header.Set("Idempotency-Key", "rp")
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(b, payload) {
			t.Fatalf("request %d: %d bytes, want %d", i, len(b), len(payload))
		}
		if replayed := resp.Header.Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
			t.Fatalf("request %d: replayed = %v", i, replayed)
		}
	}
	if upstreamCalls != 1 {
		t.Fatalf("upstream calls = %d, want 1", upstreamCalls)
	}
}

func TestRequestBodyPassedOnIntact(t *testing.T) {
	body := bytes.Repeat([]byte{0, 1, 2, 0xfe}, 1<<18)
	var got []byte
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(204)
	}}
	h := newHandler(t, newMem(t)).Wrap(c)
	r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
	r.Header.Set("Idempotency-Key", "b")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 204 || !bytes.Equal(got, body) {
		t.Fatalf("next saw %d bytes (equal=%v), status %d", len(got), bytes.Equal(got, body), w.Code)
	}
	w = httptest.NewRecorder()
	r = httptest.NewRequest("POST", "/", bytes.NewReader(body))
	r.Header.Set("Idempotency-Key", "b")
	h.ServeHTTP(w, r)
	if w.Code != 204 || w.Header().Get("Content-Length") != "" || w.Body.Len() != 0 {
		t.Fatalf("204 replay: %d, Content-Length %q, body %d bytes", w.Code, w.Header().Get("Content-Length"), w.Body.Len())
	}
}

func TestObserverEvent(t *testing.T) {
	var evs events
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(&counter{})
	serve(h, req{Key: "obs"})
	serve(h, req{Key: "obs"})
	if len(evs.All()) != 2 {
		t.Fatalf("events: %d", len(evs.All()))
	}
	first, second := evs.All()[0], evs.All()[1]
	if first.Outcome != middleware.OutcomeStored || first.Status != 201 || len(first.KeyHash) != 12 || first.KeyHash != second.KeyHash {
		t.Fatalf("first event %+v", first)
	}
	if strings.Contains(first.KeyHash, "obs") || first.Request == nil || first.Duration <= 0 {
		t.Fatalf("first event %+v", first)
	}
	if second.Outcome != middleware.OutcomeReplayed || second.Status != 201 {
		t.Fatalf("second event %+v", second)
	}
}

func TestStoreFullAnswers503(t *testing.T) {
	store := newMem(t, memstore.WithMaxRecords(1), memstore.WithShards(1))
	release := make(chan struct{})
	started := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { close(started); <-release }}
	h := newHandler(t, store).Wrap(c)
	done := make(chan struct{})
	go func() { defer close(done); serve(h, req{Key: "a"}) }()
	<-started
	if w := serve(h, req{Key: "b"}); w.Code != 503 {
		t.Fatalf("store full with only in-flight locks: %d, want 503", w.Code)
	}
	close(release)
	<-done
}

// The first execution is detached from the client but bounded by its own timeout.
func TestHandlerTimeoutBoundsExecution(t *testing.T) {
	got := make(chan error, 1)
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			got <- r.Context().Err()
		case <-time.After(10 * time.Second):
			got <- nil
		}
		w.WriteHeader(504)
	}}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.HandlerTimeout = 30 * time.Millisecond }).Wrap(c)
	serve(h, req{Key: "slow"})
	if err := <-got; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("next's context ended with %v, want the handler timeout", err)
	}
	if w := serve(h, req{Key: "slow"}); w.Header().Get("Idempotent-Replayed") == "true" {
		t.Fatal("a timed-out (504) execution was stored")
	}
}

// The observer learns a replay's or a problem's outcome before the response is
// written (Caddy's result placeholder is read when headers are written).
func TestObserverRunsBeforeTheAnswerIsWritten(t *testing.T) {
	var w *httptest.ResponseRecorder
	var writtenBefore []bool
	h := newHandler(t, newMem(t), func(s *middleware.Settings) {
		s.Observer = func(ev middleware.Event) {
			writtenBefore = append(writtenBefore, w.Code != 200 || w.Body.Len() > 0 || len(w.Header()) > 0)
		}
	}).Wrap(&counter{})
	for _, q := range []req{{Key: "o"}, {Key: "o"}, {Key: "o", Body: "other"}, {Key: "a,b"}} {
		w = httptest.NewRecorder()
		h.ServeHTTP(w, q.Build())
	}
	// The first (an execution) is observed after the fact; the replay, the
	// mismatch and the invalid key before anything is written.
	if len(writtenBefore) != 4 || !writtenBefore[0] || writtenBefore[1] || writtenBefore[2] || writtenBefore[3] {
		t.Fatalf("written before the observer ran: %v", writtenBefore)
	}
}

// The core reads the body, which is when net/http answers "Expect: 100-continue";
// next must not see the expectation again (a proxy would forward it and relay a
// second 100 Continue). Without a key the request passes through untouched.
func TestExpectContinueConsumedWithTheBody(t *testing.T) {
	var seen []string
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Expect"))
		w.WriteHeader(201)
	}}
	h := newHandler(t, newMem(t)).Wrap(c)
	expect := http.Header{"Expect": {"100-Continue"}}
	if w := serve(h, req{Key: "x1", Body: "a", Header: expect}); w.Code != 201 {
		t.Fatalf("with a key: %d", w.Code)
	}
	if w := serve(h, req{Body: "a", Header: expect}); w.Code != 201 {
		t.Fatalf("without a key: %d", w.Code)
	}
	if len(seen) != 2 || seen[0] != "" || seen[1] != "100-Continue" {
		t.Fatalf("Expect seen by next: %q, want [\"\" \"100-Continue\"]", seen)
	}
}

// A response the store can never hold (its byte bound is below max_body) is kept
// as "done, not replayable", like one above max_body: the retry gets 409 and the
// handler does not run twice.
func TestResponseTooLargeForTheStore(t *testing.T) {
	store := newMem(t, memstore.WithMaxBytes(16<<10), memstore.WithShards(1))
	body := strings.Repeat("x", 64<<10)
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		_, _ = w.Write([]byte(body))
	}}
	h := newHandler(t, store).Wrap(c)
	if w := serve(h, req{Key: "big", Body: "a"}); w.Code != 201 || w.Body.String() != body {
		t.Fatalf("first: %d, %d bytes", w.Code, w.Body.Len())
	}
	w := serve(h, req{Key: "big", Body: "a"})
	if w.Code != 409 || !strings.Contains(w.Body.String(), "not-replayable") {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if n := c.Calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// A replay carries what the first answer carried: the headers of a handler that
// wrote nothing (net/http's implicit 200), and trailers, announced or not.
func TestReplayKeepsImplicitHeadersAndTrailers(t *testing.T) {
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/empty":
			w.Header().Set("Location", "/orders/7") // and nothing written
		case "/trailers":
			w.Header().Set("Trailer", "X-Checksum")
			w.WriteHeader(201)
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Checksum", "abc")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		}
	}}
	srv := httptest.NewServer(newHandler(t, newMem(t)).Wrap(c))
	defer srv.Close()
	do := func(path string) (*http.Response, string) {
		r, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader("p"))
		r.Header.Set("Idempotency-Key", "k"+path)
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body) // trailers arrive after the body
		return resp, string(b)
	}
	for i := range 2 {
		resp, _ := do("/empty")
		if resp.StatusCode != 200 || resp.Header.Get("Location") != "/orders/7" || (resp.Header.Get("Idempotent-Replayed") == "true") != (i == 1) {
			t.Fatalf("/empty answer %d: %d Location %q replayed %q", i, resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Idempotent-Replayed"))
		}
		resp, body := do("/trailers")
		if resp.StatusCode != 201 || body != "body" || resp.Trailer.Get("X-Checksum") != "abc" || resp.Trailer.Get("X-Late") != "late" {
			t.Fatalf("/trailers answer %d: %d %q trailers %v", i, resp.StatusCode, body, resp.Trailer)
		}
	}
	if c.Calls.Load() != 2 {
		t.Fatalf("ran %d times", c.Calls.Load())
	}
}

// A declared Content-Length reserves no memory before the bytes arrive: a client
// that declares 8 MiB and sends 10 bytes costs about 10 bytes, not 8 MiB.
func TestDeclaredLengthReservesNothing(t *testing.T) {
	h := newHandler(t, newMem(t)).Wrap(&counter{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 8 {
		r := httptest.NewRequest("POST", "/charge", strings.NewReader("0123456789"))
		r.ContentLength = 8 << 20 // declared, never sent
		r.Header.Set("Idempotency-Key", "declared")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			t.Fatalf("a body shorter than declared: %d, want 400", w.Code)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("8 requests declaring 8 MiB each allocated %d bytes", got)
	}
}

// A scope entry Cookie:NAME scopes keys by one cookie, for cookie-authenticated
// APIs: two sessions never share a key's response; other cookies do not matter.
func TestCookieScope(t *testing.T) {
	c := &counter{}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.ScopeHeaders = []string{"Cookie:session"} }).Wrap(c)
	cookie := func(v string) http.Header { return http.Header{"Cookie": {v}} }
	serve(h, req{Key: "k", Header: cookie("session=alice; theme=dark")})
	if w := serve(h, req{Key: "k", Header: cookie("theme=light; session=alice")}); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same session, other cookies: not replayed (%d)", w.Code)
	}
	if w := serve(h, req{Key: "k", Header: cookie("session=bob")}); w.Header().Get("Idempotent-Replayed") == "true" {
		t.Fatal("bob got alice's response")
	}
	if c.Calls.Load() != 2 {
		t.Fatalf("ran %d times, want 2 (alice, bob)", c.Calls.Load())
	}
	if _, err := middleware.New(newMem(t), func(s *middleware.Settings) { s.ScopeHeaders = []string{"Cookie:"} }); err == nil {
		t.Fatal("Cookie: without a name accepted")
	}
}

// holding counts the holds on a store that implements cache.Holder.
type holding struct {
	*flaky
	holds atomic.Int64
}

func (s *holding) Hold() func() {
	s.holds.Add(1)
	var once sync.Once
	return func() { once.Do(func() { s.holds.Add(-1) }) }
}

// A store that implements cache.Holder is held for every tracked request and for
// a completion retried in the background until that ends, so a pool that closes
// stores on a reload never closes one under a request.
func TestStoreHeldWhileUsed(t *testing.T) {
	store := &holding{flaky: &flaky{Store: newMem(t)}}
	store.failComplete.Store(true)
	var during int64
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		during = store.holds.Load()
		w.WriteHeader(201)
	}}
	h := newHandler(t, store, func(s *middleware.Settings) { s.LockTTL = 10 * time.Second }).Wrap(c)
	serve(h, req{Key: "held"})
	if during != 1 {
		t.Fatalf("holds while the request ran: %d, want 1", during)
	}
	if n := store.holds.Load(); n != 1 {
		t.Fatalf("holds after the answer, its completion pending: %d, want 1", n)
	}
	store.failComplete.Store(false)
	testutil.Eventually(t, 5*time.Second, "the background completion to release its hold", func() bool { return store.holds.Load() == 0 })
	if w := serve(h, req{Key: "held"}); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("not stored by the background completion: %d", w.Code)
	}
	testutil.Eventually(t, 5*time.Second, "the replay to release its hold", func() bool { return store.holds.Load() == 0 })
}
