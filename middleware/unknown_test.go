package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/middleware"
)

// nextFunc adapts a function to middleware.Next, counting its runs.
type nextFunc struct {
	runs atomic.Int64
	fn   func(w http.ResponseWriter, r *http.Request) error
}

func (n *nextFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	n.runs.Add(1)
	return n.fn(w, r)
}

func handle(t *testing.T, h *middleware.Handler, next middleware.Next, key string) (*httptest.ResponseRecorder, error) {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/charge", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", key)
	return w, h.Handle(w, r, next)
}

// A first execution that was sent and got no complete answer holds its key: the
// first answer and every retry are the same outcome-unknown problem, and nothing
// runs again.
func TestUnknownOutcomeHoldsTheKey(t *testing.T) {
	var ev events
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.Observer = ev.Observe })
	reset := &nextFunc{fn: func(http.ResponseWriter, *http.Request) error {
		return middleware.MarkOutcomeUnknown(errors.New("read: connection reset by peer"))
	}}
	for i := range 3 {
		w, err := handle(t, h, reset, "charge-1")
		if err != nil || w.Code != 502 || !strings.Contains(w.Body.String(), "outcome-unknown") || (w.Header().Get("Idempotent-Replayed") == "true") != (i > 0) {
			t.Fatalf("answer %d: %d %s replayed=%q err=%v", i, w.Code, w.Body, w.Header().Get("Idempotent-Replayed"), err)
		}
	}
	if reset.runs.Load() != 1 {
		t.Fatalf("ran %d times, want once", reset.runs.Load())
	}
	if got := ev.Outcomes(); got[0] != middleware.OutcomeUnknown || got[1] != middleware.OutcomeReplayed {
		t.Fatalf("outcomes %v", got)
	}
	// A timeout is 504.
	timeout := &nextFunc{fn: func(http.ResponseWriter, *http.Request) error {
		return middleware.MarkOutcomeUnknown(context.DeadlineExceeded)
	}}
	if w, _ := handle(t, h, timeout, "charge-2"); w.Code != 504 {
		t.Fatalf("timeout: %d", w.Code)
	}
}

// A request that never left releases the key; so does an unclassified error (as
// before), and the release policy.
func TestNotSentAndReleasePolicyRelease(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		opts []middleware.Option
	}{
		"not sent":       {middleware.MarkNotSent(errors.New("dial tcp: connection refused")), nil},
		"unclassified":   {errors.New("boom"), nil},
		"release policy": {middleware.MarkOutcomeUnknown(errors.New("reset")), []middleware.Option{func(s *middleware.Settings) { s.UnknownOutcome = middleware.UnknownRelease }}},
	} {
		h := newHandler(t, newMem(t), tc.opts...)
		failing := &nextFunc{fn: func(http.ResponseWriter, *http.Request) error { return tc.err }}
		if _, err := handle(t, h, failing, "k"); !errors.Is(err, tc.err) {
			t.Fatalf("%s: err = %v, want next's error returned", name, err)
		}
		ok := &nextFunc{fn: func(w http.ResponseWriter, _ *http.Request) error { w.WriteHeader(201); return nil }}
		if w, _ := handle(t, h, ok, "k"); w.Code != 201 || ok.runs.Load() != 1 {
			t.Fatalf("%s: the retry did not run: %d", name, w.Code)
		}
	}
}

// A panic after the answer started (a reverse proxy aborting a body cut
// mid-stream) is an unknown outcome; one before is released.
func TestPanicAfterWritingIsUnknown(t *testing.T) {
	h := newHandler(t, newMem(t))
	cut := &nextFunc{fn: func(w http.ResponseWriter, _ *http.Request) error {
		w.WriteHeader(200)
		_, _ = w.Write([]byte("half"))
		panic(http.ErrAbortHandler)
	}}
	func() {
		defer func() { _ = recover() }()
		_, _ = handle(t, h, cut, "cut")
	}()
	w, _ := handle(t, h, cut, "cut")
	if w.Code != 502 || w.Header().Get("Idempotent-Replayed") != "true" || cut.runs.Load() != 1 {
		t.Fatalf("retry after a cut response: %d replayed=%q runs %d", w.Code, w.Header().Get("Idempotent-Replayed"), cut.runs.Load())
	}
	early := &nextFunc{fn: func(http.ResponseWriter, *http.Request) error { panic("before writing") }}
	func() {
		defer func() { _ = recover() }()
		_, _ = handle(t, h, early, "early")
	}()
	ok := &nextFunc{fn: func(w http.ResponseWriter, _ *http.Request) error { w.WriteHeader(201); return nil }}
	if w, _ := handle(t, h, ok, "early"); w.Code != 201 {
		t.Fatalf("a panic before writing must release: %d", w.Code)
	}
}

// fullForAnswers is a store at its bound: a completed record larger than a
// bare one (no header, no body) does not fit, as in a memory store whose room
// belongs to other clients.
type fullForAnswers struct{ cache.Store }

func (s fullForAnswers) Complete(ctx context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	if rec.Response != nil && (len(rec.Response.Body) > 0 || len(rec.Response.Header) > 0) {
		return fmt.Errorf("test store: %w", cache.ErrFull)
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// A held unknown outcome in a full store is still held: the bare record fits
// where its rendered answer does not, and retries get that answer, rendered at
// replay, never a second run (before, the record was not stored, and once the
// claim lapsed a retry ran again).
func TestUnknownOutcomeHeldInAFullStore(t *testing.T) {
	h := newHandler(t, fullForAnswers{newMem(t)}, func(s *middleware.Settings) { s.ClaimTTL = 30 * time.Millisecond },
		errorFormatOpt(errformat.StripeSpec))
	reset := &nextFunc{fn: func(http.ResponseWriter, *http.Request) error {
		return middleware.MarkOutcomeUnknown(errors.New("read: connection reset by peer"))
	}}
	first, _ := handle(t, h, reset, "full-1")
	time.Sleep(60 * time.Millisecond) // past the claim
	for range 2 {
		w, err := handle(t, h, reset, "full-1")
		if err != nil || w.Code != 502 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != first.Body.String() ||
			w.Header().Get("Idempotency-Key") != "full-1" || w.Header().Get("Stripe-Should-Retry") != "false" {
			t.Fatalf("retry: %d %s %v err=%v; want the held answer %s", w.Code, w.Body, w.Header(), err, first.Body)
		}
	}
	if n := reset.runs.Load(); n != 1 {
		t.Fatalf("ran %d times, want once", n)
	}
}

// OnHold is told of a key about to be held as an unknown outcome, before the
// hold is stored, with the request's key, headers and body, and when it was
// sent; never of a key that is released or stored, nor under the release
// policy. Its failure leaves the key held all the same.
func TestOnHoldSeesTheHeldRequest(t *testing.T) {
	store := newMem(t)
	var got []middleware.Held
	var bodies []string
	var fail bool
	onHold := func(ctx context.Context, h middleware.Held) error {
		if ctx.Err() != nil {
			t.Errorf("OnHold got a done context: %v", ctx.Err())
		}
		if rec, err := store.Get(ctx, h.StoreKey); err != nil || rec.State != cache.StateInFlight {
			t.Errorf("OnHold ran with the record %+v (%v), want the first execution's claim", rec, err)
		}
		got = append(got, h)
		bodies = append(bodies, string(h.Body))
		if fail {
			return errors.New("scheduling failed")
		}
		return nil
	}
	h := newHandler(t, store, func(s *middleware.Settings) { s.OnHold = onHold })
	reset := &nextFunc{fn: func(http.ResponseWriter, *http.Request) error {
		return middleware.MarkOutcomeUnknown(errors.New("read: connection reset by peer"))
	}}
	ok := &nextFunc{fn: func(w http.ResponseWriter, _ *http.Request) error { w.WriteHeader(201); return nil }}
	send := func(next middleware.Next, key, body string) int {
		w := httptest.NewRecorder()
		r := req{Key: key, Body: body, Header: http.Header{"X-Account": {"acct_7"}}}.Build()
		if err := h.Handle(w, r, next); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return w.Code
	}
	before := time.Now()
	if code := send(reset, "held-1", `{"id":"op_1"}`); code != 502 {
		t.Fatalf("held answer %d", code)
	}
	if len(got) != 1 || got[0].Key != "held-1" || bodies[0] != `{"id":"op_1"}` || got[0].Request.Header.Get("X-Account") != "acct_7" ||
		got[0].StoreKey == "" || got[0].Hold != middleware.DefaultSettings().UnknownHold ||
		got[0].Sent.Before(before) || got[0].Sent.After(time.Now()) { // Sent: when the first execution began
		t.Fatalf("OnHold saw %+v (body %q)", got, bodies)
	}
	send(reset, "held-1", `{"id":"op_1"}`) // a replay: nothing new is held
	send(ok, "stored-1", "x")
	if len(got) != 1 {
		t.Fatalf("OnHold called %d times, want once (replays and stored answers are not held)", len(got))
	}
	fail = true
	if code := send(reset, "held-2", "y"); code != 502 || len(got) != 2 {
		t.Fatalf("with OnHold failing: %d, calls %d", code, len(got))
	}
	if code := send(reset, "held-2", "y"); code != 502 || reset.runs.Load() != 2 {
		t.Fatalf("a failed OnHold released the key: %d, runs %d", code, reset.runs.Load())
	}
	rel := newHandler(t, newMem(t), func(s *middleware.Settings) {
		s.OnHold, s.UnknownOutcome = onHold, middleware.UnknownRelease
	})
	_ = rel.Handle(httptest.NewRecorder(), req{Key: "released-1", Body: "z"}.Build(), reset)
	if len(got) != 2 {
		t.Fatalf("OnHold called under the release policy (%d calls)", len(got))
	}
}
