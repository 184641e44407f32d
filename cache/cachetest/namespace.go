package cachetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// testNamespacesApart: two stores on one server, the namespace of one (a
// Redis prefix, a PostgreSQL table) the beginning of the other's, are two
// stores: the same key is two records, and neither store reads, claims,
// deletes, lists or reconciles the other's records.
func testNamespacesApart(t *testing.T, h Harness) {
	if h.Neighbour == nil {
		t.Skipf("%T has no namespace to share a server with", h.Store)
	}
	ctx := context.Background()
	stores := [2]cache.Store{h.Store, h.Neighbour(t)}
	var b [8]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	fp := func(i int) string { return "ns" + string(rune('0'+i)) + "-" + tag }
	unknown := &cache.Response{Status: http.StatusBadGateway, Unknown: true, Body: []byte(`{}`)}

	shared := [4]string{hexKey(""), hexKey(""), hexKey(""), hexKey("")} // completed, held, lapsed claim, live claim
	own := [2]string{hexKey(""), hexKey("")}                            // a key in store i alone
	for i, s := range stores {
		complete := func(key string, resp *cache.Response) {
			t.Helper()
			tok := claim(t, s, key, fp(i))
			mustDo(t, "complete", s.Complete(ctx, key, tok, &cache.Record{Fingerprint: fp(i), Response: resp}, ttl))
		}
		complete(shared[0], &cache.Response{Status: 201, Body: []byte(fp(i))})
		complete(shared[1], unknown)
		complete(own[i], &cache.Response{Status: 201, Body: []byte(fp(i))})
	}
	for i, s := range stores { // each claim finds the key free: the other's claim is not its own
		claimHeld(t, s, shared[2], fp(i))
	}
	h.Clock.Advance(lease + time.Second) // those claims lapse: the claims are held
	for i, s := range stores {
		claim(t, s, shared[3], fp(i))
	}

	for i, s := range stores {
		other := 1 - i
		rec, err := s.Get(ctx, shared[0])
		if err != nil || rec.Fingerprint != fp(i) || rec.Response == nil || string(rec.Response.Body) != fp(i) {
			t.Fatalf("store %d reads the shared key as %+v, %v; want its own record", i, rec, err)
		}
		if _, err := s.Get(ctx, own[other]); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("store %d reads the other's key: %v, want ErrNotFound", i, err)
		}
	}
	if err := stores[0].Delete(ctx, shared[0]); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if rec, err := stores[1].Get(ctx, shared[0]); err != nil || rec.Fingerprint != fp(1) {
		t.Fatalf("a Delete in one store took the other's record: %+v, %v", rec, err)
	}

	if r, ok := stores[1].(cache.Reconciler); ok {
		job := &cache.Job{Route: "/r", Method: "GET", URL: "/r", State: cache.JobScheduled,
			Due: h.Clock.Now(), Deadline: time.Now().Add(time.Hour), Until: time.Now().Add(time.Hour)}
		mustDo(t, "schedule", r.ScheduleReconcile(ctx, own[1], job))
		if _, err := stores[0].(cache.Reconciler).GetReconcile(ctx, own[1]); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("a store reads the other's reconcile job: %v, want ErrNotFound", err)
		}
		for range 100 {
			key, _, err := stores[0].(cache.Reconciler).ClaimReconcile(ctx, h.Clock.Now().Add(time.Hour), Token(), lease)
			if errors.Is(err, cache.ErrNotFound) {
				break
			}
			if err != nil || key == own[1] {
				t.Fatalf("a store claims %q, %v; not the other's job", key, err)
			}
		}
	}

	if _, ok := h.Store.(cache.Lister); !ok {
		return
	}
	for i, s := range stores {
		l := s.(cache.Lister)
		for _, held := range []bool{false, true} {
			for k, rec := range listAll(t, l, cache.ListQuery{Held: held}) {
				if rec.Fingerprint == fp(1-i) {
					t.Errorf("store %d lists the other's record as %s (held %v, fingerprint %s)", i, k, held, rec.Fingerprint)
				}
			}
		}
		for _, k := range []string{shared[1], shared[2], own[i]} {
			got := listAll(t, l, cache.ListQuery{Prefix: k[:40]})
			if rec := got[k]; rec == nil || rec.Fingerprint != fp(i) || len(got) != 1 {
				t.Errorf("store %d lists %s as %v, want its own record alone", i, k, got)
			}
		}
	}
}
