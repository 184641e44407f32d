package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// outage is a store that can be taken down on demand: then every call fails
// as a client library's does when nothing listens (a refused dial), after
// lag (the library's dial retries). claims counts the claims that reached
// it, pings the pings; while pingGate is set, a ping waits for it.
type outage struct {
	cache.Store
	down     atomic.Bool
	claims   atomic.Int64
	pings    atomic.Int64
	lag      time.Duration
	slow     atomic.Int64          // every claim takes this long (ns), up or down
	answer   atomic.Pointer[error] // when set, claims fail with this answer of the store's instead
	pingGate chan struct{}
	// gated makes the next claim wait for claimGate before it looks at the
	// store's state.
	gated     atomic.Bool
	claimGate chan struct{}
}

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connect: connection refused", Addr: "127.0.0.1:6379"}}

func newOutage(t *testing.T, lag time.Duration) *outage {
	return &outage{Store: newMem(t), lag: lag}
}

func (o *outage) fail() error {
	if !o.down.Load() {
		return nil
	}
	time.Sleep(o.lag)
	return fmt.Errorf("teststore: claiming key: %w", errRefused)
}

func (o *outage) ClaimOrGet(ctx context.Context, key string, l cache.Claim) (*cache.Record, bool, error) {
	o.claims.Add(1)
	if o.gated.CompareAndSwap(true, false) {
		<-o.claimGate
	}
	time.Sleep(time.Duration(o.slow.Load()))
	if err := o.fail(); err != nil {
		return nil, false, err
	}
	if e := o.answer.Load(); e != nil {
		return nil, false, *e
	}
	return o.Store.ClaimOrGet(ctx, key, l)
}

func (o *outage) Complete(ctx context.Context, key, tok string, rec *cache.Record, ttl time.Duration) error {
	if err := o.fail(); err != nil {
		return err
	}
	return o.Store.Complete(ctx, key, tok, rec, ttl)
}

func (o *outage) Release(ctx context.Context, key, tok string) error {
	if err := o.fail(); err != nil {
		return err
	}
	return o.Store.Release(ctx, key, tok)
}

func (o *outage) Extend(ctx context.Context, key, tok string, lease time.Duration) error {
	if err := o.fail(); err != nil {
		return err
	}
	return o.Store.Extend(ctx, key, tok, lease)
}

func (o *outage) Ping(ctx context.Context) error {
	o.pings.Add(1)
	if o.pingGate != nil {
		select {
		case <-o.pingGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := o.fail(); err != nil {
		return err
	}
	return o.Store.Ping(ctx)
}

// breakerLogs are a handler's log lines, by message.
type breakerLogs struct{ testutil.SyncBuffer }

func (l *breakerLogs) logger() *slog.Logger { return slog.New(slog.NewTextHandler(&l.SyncBuffer, nil)) }

func (l *breakerLogs) count(msg string) int { return strings.Count(l.String(), msg) }

const (
	msgDown  = `msg="idempotency store down`
	msgAgain = `msg="idempotency store answers again`
	msgEach  = `msg="idempotency store unavailable"`
)

// The store goes down: after three claims in a row that could not reach it
// (each after the client's lag), a tracked request gets the same 503 at once,
// with Retry-After, and no store call; the store comes back: the background
// ping closes the breaker and requests are served. One line when it opens,
// one when it closes, none per refused request; nothing ran during the
// outage.
func TestBreakerAnswersAtOnceWhileTheStoreIsDown(t *testing.T) {
	store := newOutage(t, 150*time.Millisecond)
	var logs breakerLogs
	c := &counter{}
	core := newHandler(t, store, func(s *middleware.Settings) { s.Logger = logs.logger() })
	h := core.Wrap(c)
	if w := serve(h, req{Key: "before"}); w.Code != 201 {
		t.Fatal(w.Code)
	}
	store.down.Store(true)
	for i := range 3 {
		began := time.Now()
		w := serve(h, req{Key: fmt.Sprint("opening-", i)})
		checkProblem(t, w.Header(), w.Body.Bytes(), 503, middleware.ProblemStoreUnavailable)
		if d := time.Since(began); d < store.lag {
			t.Fatalf("claim %d answered in %v: it did not wait for the store", i, d)
		}
		if i < 2 && core.StoreDown() != nil {
			t.Fatalf("open after %d failed claims, want 3", i+1)
		}
	}
	if err := core.StoreDown(); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("StoreDown after three failed claims: %v", err)
	}
	claims := store.claims.Load()
	for i := range 20 {
		began := time.Now()
		w := serve(h, req{Key: fmt.Sprint("down-", i)})
		checkProblem(t, w.Header(), w.Body.Bytes(), 503, middleware.ProblemStoreUnavailable)
		if w.Header().Get("Retry-After") != "1" {
			t.Fatalf("Retry-After = %q, want 1", w.Header().Get("Retry-After"))
		}
		if d := time.Since(began); d > store.lag/2 {
			t.Fatalf("a 503 with the store known down took %v", d)
		}
	}
	if n := store.claims.Load() - claims; n != 0 {
		t.Fatalf("%d claims sent to a store known down", n)
	}
	if n := logs.count(msgDown); n != 1 {
		t.Fatalf("%d lines saying the store is down, want 1:\n%s", n, logs.String())
	}
	if n := logs.count(msgEach); n != 3 {
		t.Fatalf("%d per-request lines, want 3 (the claims that failed, none of the refused):\n%s", n, logs.String())
	}
	store.down.Store(false)
	testutil.Eventually(t, 5*time.Second, "the breaker to close", func() bool { return core.StoreDown() == nil })
	if w := serve(h, req{Key: "after"}); w.Code != 201 {
		t.Fatalf("once the store answers: %d", w.Code)
	}
	if n := logs.count(msgAgain); n != 1 || !strings.Contains(logs.String(), "refused=20") {
		t.Fatalf("%d lines saying the store answers again (want 1, with refused=20):\n%s", n, logs.String())
	}
	if n := c.Calls.Load(); n != 2 {
		t.Fatalf("%d executions, want 2: the outage ran nothing", n)
	}

	// It goes down again: the breaker opens again, one more line each way.
	store.down.Store(true)
	for i := range 3 {
		serve(h, req{Key: fmt.Sprint("again-", i)})
	}
	if core.StoreDown() == nil {
		t.Fatal("not open after the second outage's three failed claims")
	}
	store.down.Store(false)
	testutil.Eventually(t, 5*time.Second, "the breaker to close again", func() bool { return core.StoreDown() == nil })
	if logs.count(msgDown) != 2 || logs.count(msgAgain) != 2 {
		t.Fatalf("two outages: %d down lines, %d answers-again lines; want 2 and 2:\n%s", logs.count(msgDown), logs.count(msgAgain), logs.String())
	}
}

// Answers the store gives are no outage, however many: a full store, a
// record it cannot read, an error of its own; nor is a slow store that
// answers, nor failures between which a claim reaches it.
func TestBreakerStaysClosedWhileTheStoreAnswers(t *testing.T) {
	for _, answer := range []error{cache.ErrFull, cache.ErrCorrupt, errors.New("ERR max number of clients reached"), errDown} {
		store := newOutage(t, 0)
		store.answer.Store(&answer)
		h := newHandler(t, store).Wrap(&counter{})
		for i := range 10 {
			serve(h, req{Key: fmt.Sprint("k", i)})
		}
		if n := store.claims.Load(); n != 10 {
			t.Fatalf("%v: %d of 10 claims sent to the store; it answered each", answer, n)
		}
	}

	// Failures with a slow answer between each pair of them: a store slow
	// under load, with some claims failing.
	store := newOutage(t, 0)
	store.slow.Store(int64(100 * time.Millisecond))
	core := newHandler(t, store)
	h := core.Wrap(&counter{})
	for i := range 5 {
		store.down.Store(true)
		serve(h, req{Key: fmt.Sprint("a", i)})
		serve(h, req{Key: fmt.Sprint("b", i)})
		store.down.Store(false)
		if w := serve(h, req{Key: fmt.Sprint("slow", i)}); w.Code != 201 {
			t.Fatalf("a slow store that answers: %d", w.Code)
		}
	}
	if err := core.StoreDown(); err != nil {
		t.Fatalf("open on failures with an answer between each pair: %v", err)
	}
}

// While the background ping waits on a store that does not answer, requests
// are not held behind it: each gets its 503 at once. A claim that reaches
// the store closes the breaker too, the ping still waiting.
func TestBreakerRequestsDoNotWaitForThePing(t *testing.T) {
	store := newOutage(t, 0)
	store.pingGate = make(chan struct{})
	core := newHandler(t, store, func(s *middleware.Settings) { s.StoreTimeout = time.Minute })
	h := core.Wrap(&counter{})
	store.down.Store(true)
	for i := range 3 {
		serve(h, req{Key: fmt.Sprint("opening-", i)})
	}
	testutil.Eventually(t, 5*time.Second, "the ping to start", func() bool { return store.pings.Load() == 1 })
	store.down.Store(false) // back, while the ping still waits
	began := time.Now()
	if w := serve(h, req{Key: "during-ping"}); w.Code != 503 || time.Since(began) > 100*time.Millisecond {
		t.Fatalf("with the ping under way: %d after %v; want 503 at once", w.Code, time.Since(began))
	}
	close(store.pingGate)
	testutil.Eventually(t, 5*time.Second, "the ping to close it", func() bool { return core.StoreDown() == nil })
	if w := serve(h, req{Key: "after"}); w.Code != 201 {
		t.Fatalf("after the ping answered: %d", w.Code)
	}

	// A request in flight when the breaker opened reaches the store once it
	// is back: its answer closes the breaker as a ping would.
	store = newOutage(t, 0)
	store.pingGate = make(chan struct{}) // the ping never answers
	t.Cleanup(func() { close(store.pingGate) })
	core = newHandler(t, store, func(s *middleware.Settings) { s.StoreTimeout = time.Minute })
	h = core.Wrap(&counter{})
	store.down.Store(true)
	store.claimGate = make(chan struct{})
	store.gated.Store(true)
	inFlight := make(chan int)
	go func() { inFlight <- serve(h, req{Key: "in-flight"}).Code }()
	testutil.Eventually(t, 5*time.Second, "the claim in flight", func() bool { return !store.gated.Load() })
	for i := range 3 {
		serve(h, req{Key: fmt.Sprint("opening-", i)})
	}
	if core.StoreDown() == nil {
		t.Fatal("not open")
	}
	store.down.Store(false)
	close(store.claimGate) // the claim in flight reaches the store, which is back
	if code := <-inFlight; code != 201 {
		t.Fatalf("the request in flight: %d", code)
	}
	if err := core.StoreDown(); err != nil {
		t.Fatalf("a claim reached the store and the breaker is still open: %v", err)
	}
}

// Under fail_open, a request with the store known down passes through
// untracked at once, as one whose claim failed does.
func TestBreakerFailOpen(t *testing.T) {
	store := newOutage(t, 0)
	c := &counter{}
	var evs events
	core := newHandler(t, store, func(s *middleware.Settings) { s.FailOpen = true; s.Observer = evs.Observe })
	h := core.Wrap(c)
	store.down.Store(true)
	for i := range 4 {
		if w := serve(h, req{Key: fmt.Sprint("k", i)}); w.Code != 201 {
			t.Fatalf("fail_open: %d", w.Code)
		}
	}
	if store.claims.Load() != 3 || c.Calls.Load() != 4 {
		t.Fatalf("claims %d, calls %d; want 3 claims (then known down) and 4 calls", store.claims.Load(), c.Calls.Load())
	}
	for _, ev := range evs.All() {
		if ev.Outcome != middleware.OutcomeStoreError || ev.Status != 201 {
			t.Fatalf("event %+v; want store_error, 201", ev)
		}
	}
}

// One breaker per store: handlers over the same store (the proxy's routes)
// share it, so it opens once; a handler over another store (a reload that
// opened a new one) starts closed, whatever the old one's state.
func TestBreakerIsTheStores(t *testing.T) {
	store := newOutage(t, 0)
	var logs breakerLogs
	a := newHandler(t, store, func(s *middleware.Settings) { s.Logger = logs.logger() })
	b := newHandler(t, store, func(s *middleware.Settings) { s.Logger = logs.logger() })
	store.down.Store(true)
	serve(a.Wrap(&counter{}), req{Key: "a1"})
	serve(b.Wrap(&counter{}), req{Key: "b1"})
	serve(a.Wrap(&counter{}), req{Key: "a2"})
	if a.StoreDown() == nil || b.StoreDown() == nil {
		t.Fatalf("three failed claims through two handlers of one store: open a=%v b=%v", a.StoreDown(), b.StoreDown())
	}
	if n := logs.count(msgDown); n != 1 {
		t.Fatalf("%d down lines for one store, want 1", n)
	}
	fresh := newOutage(t, 0)
	reloaded := newHandler(t, fresh)
	if err := reloaded.StoreDown(); err != nil {
		t.Fatalf("a handler over a new store starts known down: %v", err)
	}
	if w := serve(reloaded.Wrap(&counter{}), req{Key: "new"}); w.Code != 201 {
		t.Fatalf("the new store: %d", w.Code)
	}
}

// A first execution that holds its key when the breaker opens loses
// nothing: its completion, which the store refuses, is retried in the
// background as before (the breaker refuses claims only), and lands once the
// store is back; its retry is the replay.
func TestBreakerKeepsTheCompletionOfAHeldKey(t *testing.T) {
	store := newOutage(t, 0)
	started, finish := make(chan struct{}), make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "held" {
			close(started)
			<-finish
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte("done"))
	}}
	core := newHandler(t, store, func(s *middleware.Settings) { s.ClaimTTL = time.Minute })
	h := core.Wrap(c)
	first := make(chan int)
	go func() { first <- serve(h, req{Key: "held"}).Code }()
	<-started
	store.down.Store(true)
	for i := range 3 {
		serve(h, req{Key: fmt.Sprint("opening-", i)})
	}
	if core.StoreDown() == nil {
		t.Fatal("not open")
	}
	close(finish) // it answers with the store down: its completion fails
	if code := <-first; code != 201 {
		t.Fatalf("the first execution: %d", code)
	}
	store.down.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := core.Wait(ctx); err != nil {
		t.Fatalf("the completion retried in the background: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "the breaker to close", func() bool { return core.StoreDown() == nil })
	if w := serve(h, req{Key: "held"}); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "done" {
		t.Fatalf("the retry: %d replayed=%q %q; want the stored answer", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	if n := c.Calls.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// What counts as not reaching the store: the network's errors, a store call
// that store_timeout ended; not an answer.
func TestBreakerCountsUnreachableOnly(t *testing.T) {
	cases := []struct {
		err  error
		down bool
	}{
		{errRefused, true},
		{fmt.Errorf("pgstore: %w", syscall.ECONNREFUSED), true},
		{fmt.Errorf("redisstore: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("redisstore: reading: %w", errors.Join(errors.New("x"), syscall.ECONNRESET)), true},
		{&net.DNSError{Err: "no such host", Name: "redis"}, true},
		{cache.ErrClaimLost, false},
		{cache.ErrFull, false},
		{cache.ErrCorrupt, false},
		{errors.New("LOADING Redis is loading the dataset in memory"), false},
		{context.Canceled, false},
	}
	for _, c := range cases {
		store := newOutage(t, 0)
		store.answer.Store(&c.err)
		store.pingGate = make(chan struct{}) // the ping never answers: only the claims count
		t.Cleanup(func() { close(store.pingGate) })
		core := newHandler(t, store)
		for i := range 3 {
			serve(core.Wrap(&counter{}), req{Key: fmt.Sprint("k", i)})
		}
		if down := core.StoreDown() != nil; down != c.down {
			t.Errorf("%v: open %v, want %v", c.err, down, c.down)
		}
	}
}
