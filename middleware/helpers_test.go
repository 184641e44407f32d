package middleware_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/webhook"
)

// counter is a handler that counts its executions and answers as told.
type counter struct {
	calls atomic.Int64
	fn    func(w http.ResponseWriter, r *http.Request)
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.calls.Add(1)
	if c.fn != nil {
		c.fn(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Call", itoa(n))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte("call " + itoa(n) + " body " + string(body)))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func newMem(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newHandler(t testing.TB, store cache.Store, opts ...middleware.Option) *middleware.Handler {
	t.Helper()
	h, err := middleware.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

type req struct {
	method, target, key, body string
	header                    http.Header
}

func (q req) build() *http.Request {
	m := q.method
	if m == "" {
		m = http.MethodPost
	}
	target := q.target
	if target == "" {
		target = "/charge"
	}
	r := httptest.NewRequest(m, target, strings.NewReader(q.body))
	if q.key != "" {
		r.Header.Set("Idempotency-Key", q.key)
	}
	for k, v := range q.header {
		r.Header[k] = v
	}
	return r
}

func serve(h http.Handler, q req) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, q.build())
	return w
}

// events collects observer events.
type events struct {
	mu  sync.Mutex
	all []middleware.Event
}

func (e *events) observe(ev middleware.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) outcomes() []middleware.Outcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]middleware.Outcome, len(e.all))
	for i, ev := range e.all {
		out[i] = ev.Outcome
	}
	return out
}

// flaky wraps a store and fails chosen operations.
type flaky struct {
	cache.Store
	failLock, failComplete, failRelease atomic.Bool
	extends                             chan struct{}
	completes                           atomic.Int64 // Complete calls
	// lockLostOnce makes the next Complete answer ErrLockLost, as when another
	// claim held the key for a moment (a refused claim, since undone).
	lockLostOnce atomic.Bool
}

var errDown = errors.New("store down")

func (f *flaky) LockOrGet(ctx context.Context, key string, l cache.Lock) (*cache.Record, bool, error) {
	if f.failLock.Load() {
		return nil, false, errDown
	}
	return f.Store.LockOrGet(ctx, key, l)
}

func (f *flaky) Complete(ctx context.Context, key, tok string, rec *cache.Record, ttl time.Duration) error {
	f.completes.Add(1)
	if f.failComplete.Load() {
		return errDown
	}
	if f.lockLostOnce.CompareAndSwap(true, false) {
		return cache.ErrLockLost
	}
	return f.Store.Complete(ctx, key, tok, rec, ttl)
}

func (f *flaky) Release(ctx context.Context, key, tok string) error {
	if f.failRelease.Load() {
		return errDown
	}
	return f.Store.Release(ctx, key, tok)
}

func (f *flaky) Extend(ctx context.Context, key, tok string, lease time.Duration) error {
	err := f.Store.Extend(ctx, key, tok, lease)
	if f.extends != nil {
		select {
		case f.extends <- struct{}{}:
		default:
		}
	}
	return err
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	testutil.Eventually(t, 5*time.Second, what, cond)
}

// errorFormatOpt, keySourceOpt and webhookOpt build what plugs into the core
// from its configuration string, as package config does.
func errorFormatOpt(spec string) middleware.Option {
	f, err := errformat.Parse(spec)
	if err != nil {
		panic(err)
	}
	return func(s *middleware.Settings) { s.ErrorFormat = f }
}

func keySourceOpt(spec string) middleware.Option {
	if spec == "" {
		return func(*middleware.Settings) {} // the key header
	}
	ks, err := keysource.Parse(spec, "Idempotency-Key")
	if err != nil {
		panic(err)
	}
	return func(s *middleware.Settings) { s.KeySource = ks }
}

func webhookOpt(w webhook.Webhook) middleware.Option {
	v, err := webhook.New(w)
	if err != nil {
		panic(err)
	}
	return func(s *middleware.Settings) { s.Verifier, s.KeySource = v, v.KeySource() }
}

type httptestResult struct {
	status   int
	replayed bool
	body     string
}

func result(w *httptest.ResponseRecorder) *httptestResult {
	return &httptestResult{w.Code, w.Header().Get("Idempotent-Replayed") == "true", w.Body.String()}
}
