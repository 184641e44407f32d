package cachetest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// unknownOutcome is a held unknown outcome, as the middleware stores it.
func unknownOutcome() *cache.Record {
	body := `{"type":"urn:idemproxy:problem:outcome-unknown"}`
	return &cache.Record{
		State:       cache.StateCompleted,
		Fingerprint: "fp",
		Response: &cache.Response{Status: 502, Header: http.Header{"Content-Type": {"application/problem+json"}},
			Body: []byte(body), BodySize: int64(len(body)), Unknown: true},
	}
}

// testResolveUnknown: an operator's resolve replaces a held unknown outcome
// with the response it gives, keeping the fingerprint and creation time, and
// the record lives for the new ttl; nothing else is ever resolved.
func testResolveUnknown(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp-first")
	created := mustGet(t, h.Store, key).CreatedAt
	if err := h.Store.Complete(ctx, key, tok, unknownOutcome(), ttl); err != nil {
		t.Fatalf("Complete(unknown): %v", err)
	}
	if rec := mustGet(t, h.Store, key); rec.Response == nil || !rec.Response.Unknown {
		t.Fatalf("stored unknown outcome reads back as %+v", rec.Response)
	}
	h.Clock.Advance(10 * time.Minute)
	want := &cache.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/charges/ch_1"}},
		Body: []byte(`{"id":"ch_1"}`), BodySize: 13}
	if err := h.Store.Resolve(ctx, key, want, 2*ttl); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	rec := mustLoad(t, h.Store, key)
	switch {
	case rec.State != cache.StateCompleted || rec.Response == nil:
		t.Fatalf("resolved record = %+v", rec)
	case rec.Response.Unknown:
		t.Fatal("resolved record is still an unknown outcome")
	case rec.Response.Status != 201 || string(rec.Response.Body) != `{"id":"ch_1"}` || rec.Response.Header.Get("Location") != "/charges/ch_1":
		t.Fatalf("resolved response = %+v", rec.Response)
	case rec.Fingerprint != "fp-first":
		t.Fatalf("fingerprint = %q, want the first request's", rec.Fingerprint)
	case !rec.CreatedAt.Round(time.Second).Equal(created.Round(time.Second)):
		t.Fatalf("CreatedAt = %v, want the claim's %v", rec.CreatedAt, created)
	}
	if d := rec.ExpiresAt.Sub(h.Clock.Now()); d < 2*ttl-time.Minute || d > 2*ttl+time.Minute {
		t.Fatalf("resolved record expires in %v, want about %v", d, 2*ttl)
	}
	// A re-sent Complete of the first execution writes nothing over the answer.
	if err := h.Store.Complete(ctx, key, tok, unknownOutcome(), ttl); err != nil {
		t.Fatalf("re-sent Complete after resolve: %v", err)
	}
	if rec := mustGet(t, h.Store, key); rec.Response.Unknown || rec.Response.Status != 201 {
		t.Fatalf("a re-sent Complete overwrote the resolution: %+v", rec.Response)
	}
	// The resolved record is an answer now: it cannot be resolved again.
	if err := h.Store.Resolve(ctx, key, want, ttl); !errors.Is(err, cache.ErrNotUnknown) {
		t.Fatalf("Resolve of a resolved record = %v, want ErrNotUnknown", err)
	}
	h.Clock.Advance(2*ttl + time.Minute)
	if _, err := h.Store.Get(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get after the new ttl = %v, want ErrNotFound", err)
	}
}

// testReleaseUnknown: a nil resolution deletes the held unknown outcome, and the
// next claim runs.
func testReleaseUnknown(t *testing.T, h Harness) {
	ctx := context.Background()
	key := Key(t, "k")
	tok := claim(t, h.Store, key, "fp")
	if err := h.Store.Complete(ctx, key, tok, unknownOutcome(), ttl); err != nil {
		t.Fatalf("Complete(unknown): %v", err)
	}
	if n, ok := h.Store.(cache.Notifier); ok {
		changed, cancel := n.Subscribe(key)
		defer cancel()
		if err := h.Store.Resolve(ctx, key, nil, ttl); err != nil {
			t.Fatalf("Resolve(nil): %v", err)
		}
		waitClosed(t, changed, "release of an unknown outcome")
	} else if err := h.Store.Resolve(ctx, key, nil, ttl); err != nil {
		t.Fatalf("Resolve(nil): %v", err)
	}
	if err := h.Store.Resolve(ctx, key, nil, ttl); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("second release = %v, want ErrNotFound", err)
	}
	claim(t, h.Store, key, "fp")
}

// testResolveOnlyUnknown: in-flight claims, completed answers, missing and
// lapsed records are never touched.
func testResolveOnlyUnknown(t *testing.T, h Harness) {
	ctx := context.Background()
	resp := &cache.Response{Status: 200}

	inFlight := Key(t, "in-flight")
	tok := claim(t, h.Store, inFlight, "fp")
	for _, r := range []*cache.Response{resp, nil} {
		if err := h.Store.Resolve(ctx, inFlight, r, ttl); !errors.Is(err, cache.ErrNotUnknown) {
			t.Fatalf("Resolve(in flight, %v) = %v, want ErrNotUnknown", r, err)
		}
	}
	if err := h.Store.Extend(ctx, inFlight, tok, lease); err != nil {
		t.Fatalf("the lock was touched by Resolve: Extend = %v", err)
	}

	answered := Key(t, "answered")
	tok = claim(t, h.Store, answered, "fp")
	if err := h.Store.Complete(ctx, answered, tok, completed(201, "created"), ttl); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*cache.Response{resp, nil} {
		if err := h.Store.Resolve(ctx, answered, r, ttl); !errors.Is(err, cache.ErrNotUnknown) {
			t.Fatalf("Resolve(answered, %v) = %v, want ErrNotUnknown", r, err)
		}
	}
	if rec := mustGet(t, h.Store, answered); string(rec.Response.Body) != "created" {
		t.Fatalf("the answer was touched by Resolve: %+v", rec.Response)
	}

	if err := h.Store.Resolve(ctx, Key(t, "missing"), resp, ttl); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Resolve(missing) = %v, want ErrNotFound", err)
	}
	lapsed := Key(t, "lapsed")
	tok = claim(t, h.Store, lapsed, "fp")
	if err := h.Store.Complete(ctx, lapsed, tok, unknownOutcome(), time.Minute); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(2 * time.Minute)
	if err := h.Store.Resolve(ctx, lapsed, resp, ttl); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Resolve(lapsed) = %v, want ErrNotFound", err)
	}
	claim(t, h.Store, lapsed, "fp") // and the lapsed key is free, as it was
}

func mustGet(t *testing.T, s cache.Store, key string) *cache.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return rec
}
