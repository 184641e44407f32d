package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"

	"github.com/idemproxy/idemproxy/middleware"
)

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
			t.Errorf("OnHold ran with the record %+v (%v), want the first execution's lock", rec, err)
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
