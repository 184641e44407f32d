package middleware

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// A store known down answers at once. Without this, every tracked request
// of an outage pays the client library's dial retries before its 503 (1.7 s
// with go-redis's defaults). The breaker watches the claims: once
// breakerFailures of them in a row could not reach the store (no claim in
// between reached it), it opens, and tracked requests get the store's 503
// (or pass through under fail_open) without a store call, while one
// goroutine pings the store in the background. The first ping, or claim, that
// the store answers closes it. One line is logged when it opens and one when
// it closes, never one per refused request.
//
// Only a failure to reach the store counts: a refused or reset connection,
// a name that does not resolve, a call that store_timeout ended. An answer
// the store gave, whatever it says (a key held, a full store, a record that
// does not decode, a throttled request), reached it; so does a claim that is
// slow but answered, however slow. Only the claim consults the breaker: the
// writes of a request that holds a key (its completion, retried in the
// background; its release; its claim's renewal) go to the store as they
// would without it.
//
// One breaker serves every handler over the same store (the proxy's routes,
// the Caddy handlers of one store), so an outage opens it once; a store
// opened anew (a reload that changes the store) has one of its own.

// breakerFailures is how many claims in a row that could not reach the store
// open the breaker: a single failure may be one broken connection of a pool
// whose store is up.
const breakerFailures = 3

// The background ping waits probeFirst after the breaker opens, then twice as
// long after each failed ping, up to probeEvery: the breaker closes at most
// probeEvery (plus the ping's own time) after the store answers again.
const (
	probeFirst = 25 * time.Millisecond
	probeEvery = 500 * time.Millisecond
)

// breaker is a store's circuit breaker (see above).
type breaker struct {
	store cache.Store
	open  atomic.Bool
	// failures counts the claims in a row that could not reach the store.
	failures atomic.Int32
	refused  atomic.Int64 // requests answered without a claim while open

	mu     sync.Mutex
	since  time.Time // when it opened
	err    error     // what a refused request reports: the store down, and why
	logger *slog.Logger
	users  int // handlers using it (breakerFor)
}

// breakers are the breakers of the stores handlers use, by store: an entry
// lives while a handler over its store does.
var breakers = struct {
	mu sync.Mutex
	m  map[cache.Store]*breaker
}{m: map[cache.Store]*breaker{}}

// breakerFor returns the breaker of h's store, shared with the other
// handlers over it; nil for a store in the process, which is never down.
func breakerFor(h *Handler, store cache.Store) *breaker {
	if h.inProcess {
		return nil
	}
	if !reflect.TypeOf(store).Comparable() { // no map key: a breaker of its own
		return &breaker{store: store}
	}
	breakers.mu.Lock()
	defer breakers.mu.Unlock()
	b := breakers.m[store]
	if b == nil {
		b = &breaker{store: store}
		breakers.m[store] = b
	}
	b.users++
	runtime.AddCleanup(h, func(b *breaker) {
		breakers.mu.Lock()
		defer breakers.mu.Unlock()
		if b.users--; b.users == 0 && breakers.m[b.store] == b {
			delete(breakers.m, b.store)
		}
	}, b)
	return b
}

// state returns why the store is known down, or nil when the breaker is
// closed (or there is none).
func (b *breaker) state() error {
	if b == nil || !b.open.Load() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// down is state for a tracked request, which is refused (counted) when the
// store is known down.
func (b *breaker) down() error {
	err := b.state()
	if err != nil {
		b.refused.Add(1)
	}
	return err
}

// observe takes the result of a claim: a failure to reach the store counts
// towards opening the breaker (h opens it: its logger says so, its
// store_timeout bounds the pings); anything else resets the count, and
// closes an open breaker.
func (b *breaker) observe(h *Handler, err error) {
	if b == nil {
		return
	}
	if err == nil || !unreachable(err) {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		if b.open.Load() {
			b.close("a claim")
		}
		return
	}
	if b.failures.Add(1) >= breakerFailures && b.open.CompareAndSwap(false, true) {
		b.trip(h, err)
	}
}

// trip opens the breaker, logs it, and starts the background ping.
func (b *breaker) trip(h *Handler, err error) {
	b.mu.Lock()
	b.since, b.logger = time.Now(), h.logger
	b.err = fmt.Errorf("%w since %s: %w", errStoreDown, b.since.UTC().Format(time.RFC3339), err)
	b.mu.Unlock()
	b.refused.Store(0)
	what := "tracked requests get 503 at once"
	if h.s.FailOpen {
		what = "tracked requests pass through untracked at once (fail_open)"
	}
	h.logger.LogAttrs(context.Background(), slog.LevelError, "idempotency store down: "+what+" until it answers again",
		slog.Int("failed_claims", breakerFailures), slog.Any("error", err))
	go b.probe(h.s.StoreTimeout)
}

// probe pings the store until it answers (or a claim did), then closes the
// breaker. A store closed meanwhile (a reload replaced it) answers its ping
// with an error of its own, which ends the probe too.
func (b *breaker) probe(timeout time.Duration) {
	for wait := probeFirst; b.open.Load(); wait = min(2*wait, probeEvery) {
		time.Sleep(wait)
		if !b.open.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := b.store.Ping(ctx)
		cancel()
		if err == nil || !unreachable(err) {
			b.close("a ping")
			return
		}
	}
}

// close closes an open breaker: what answered says which call reached the
// store.
func (b *breaker) close(what string) {
	if !b.open.CompareAndSwap(true, false) {
		return
	}
	b.failures.Store(0)
	b.mu.Lock()
	since, logger := b.since, b.logger
	b.mu.Unlock()
	logger.LogAttrs(context.Background(), slog.LevelInfo, "idempotency store answers again: tracked requests are served",
		slog.String("answered", what), slog.Duration("down_for", time.Since(since)), slog.Int64("refused", b.refused.Load()))
}

// errStoreDown is a request refused, without a store call, because the
// store is known down.
var errStoreDown = errors.New("idempotency store known down (its last claims could not reach it; pinged in the background)")

// unreachable reports whether err says the store could not be reached, as
// opposed to an answer from it: a network error (a refused or reset
// connection, a dial or read timeout, a name that does not resolve), a
// connection closed under the call, or store_timeout passed.
func unreachable(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return true
	}
	return false
}
