package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

// storedHolds reports whether any stored header or body of the record under
// key (as the request q sends it) holds s.
func storedHolds(t *testing.T, h *middleware.Handler, store cache.Store, q req, s string) bool {
	t.Helper()
	rec, err := store.Get(context.Background(), h.StoreKey(q.Build(), q.Key))
	if err != nil {
		t.Fatalf("reading the record: %v", err)
	}
	if rec.Response == nil {
		return false
	}
	for name, vals := range rec.Response.Header {
		if strings.Contains(name, s) || strings.Contains(strings.Join(vals, ","), s) {
			return true
		}
	}
	return strings.Contains(string(rec.Response.Body), s)
}

// The core's outcome-unknown answer, an upstream's answer that echoes the key,
// and a resolution naming the key header are stored without the key; every
// replay carries the replaying request's own key back. A key header of another
// value is the upstream's own and is kept.
func TestStoredAnswersHoldNoRawKey(t *testing.T) {
	store := newMem(t)
	var mode string
	h := newHandler(t, store)
	next := middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
		switch mode {
		case "unknown":
			return middleware.MarkOutcomeUnknown(errors.New("reset after the write"))
		case "echo":
			w.Header().Set("Idempotency-Key", r.Header.Get("Idempotency-Key"))
		case "other":
			w.Header().Set("Idempotency-Key", "the-upstream's-own")
		}
		w.WriteHeader(http.StatusCreated)
		return nil
	})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _ = h.Handle(w, r, next) })
	for _, c := range []struct{ mode, key, wantEcho string }{
		{"unknown", "RAW-unknown-1", "RAW-unknown-1"},
		{"echo", "RAW-echo-1", "RAW-echo-1"},
		{"other", "RAW-other-1", "the-upstream's-own"},
	} {
		mode = c.mode
		q := req{Key: c.key, Body: "x"}
		first := serve(handler, q)
		again := serve(handler, q)
		if again.Header().Get("Idempotent-Replayed") != "true" || again.Header().Get("Idempotency-Key") != c.wantEcho ||
			first.Header().Get("Idempotency-Key") != c.wantEcho {
			t.Fatalf("%s: first %d %v, replay %d %v; want the key header %q on both", c.mode, first.Code, first.Header(), again.Code, again.Header(), c.wantEcho)
		}
		if storedHolds(t, h, store, q, c.key) {
			t.Fatalf("%s: the raw key is in the stored answer", c.mode)
		}
	}
	// A resolution that names the key header: stored as the echo marker.
	mode = "unknown"
	q := req{Key: "RAW-resolved-1", Body: "x"}
	serve(handler, q)
	err := h.Resolve(context.Background(), h.StoreKey(q.Build(), q.Key), &middleware.Resolution{
		Status: 201, Header: http.Header{"Idempotency-Key": {"RAW-resolved-1"}, "Location": {"/charges/1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if storedHolds(t, h, store, q, q.Key) {
		t.Fatal("resolved: the raw key is in the stored answer")
	}
	if w := serve(handler, q); w.Code != 201 || w.Header().Get("Idempotency-Key") != q.Key || w.Header().Get("Location") != "/charges/1" {
		t.Fatalf("resolved replay: %d %v", w.Code, w.Header())
	}
}
