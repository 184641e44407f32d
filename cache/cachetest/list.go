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

// hexKey returns a store key shaped as the middleware's (64 lowercase hex
// digits) that begins with base.
func hexKey(base string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return (base + hex.EncodeToString(b))[:64]
}

// listAll follows a List query's cursors to the end.
func listAll(t *testing.T, s cache.Lister, q cache.ListQuery) map[string]*cache.Record {
	t.Helper()
	out := map[string]*cache.Record{}
	for pages := 0; ; pages++ {
		if pages == 1000 {
			t.Fatalf("List(%+v): no last page after 1000 pages", q)
		}
		page, err := s.List(context.Background(), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		for _, r := range page.Records {
			out[r.Key] = r.Record
		}
		if page.Cursor == "" {
			return out
		}
		q.Cursor = page.Cursor
	}
}

// testListHeld: a store that lists its records lists the held unknown
// outcomes (stored ones and lapsed claims) and nothing else when asked for
// them, across pages; every live record by a prefix of its key; and refuses a
// cursor it did not make.
func testListHeld(t *testing.T, h Harness) {
	s, ok := h.Store.(cache.Lister)
	if !ok {
		t.Skipf("%T lists no records", h.Store)
	}
	ctx := context.Background()
	var b [8]byte
	_, _ = rand.Read(b[:])
	base := hex.EncodeToString(b[:]) // 16 digits of this test's own
	complete := func(key string, resp *cache.Response, ttl time.Duration) {
		t.Helper()
		tok := claim(t, h.Store, key, "fp-"+key[:20])
		mustDo(t, "complete "+key, h.Store.Complete(ctx, key, tok, &cache.Record{Fingerprint: "fp-" + key[:20], Response: resp}, ttl))
	}
	unknown := &cache.Response{Status: http.StatusBadGateway, Unknown: true, Header: http.Header{"Content-Type": {"application/problem+json"}}, Body: []byte(`{}`)}

	lapsed := hexKey(base)
	claimHeld(t, h.Store, lapsed, "fp-lapsed")
	held := map[string]bool{lapsed: true}
	for range 5 {
		k := hexKey(base)
		complete(k, unknown, ttl)
		held[k] = true
	}
	done := hexKey(base)
	complete(done, &cache.Response{Status: 201, Body: []byte("ok")}, ttl)
	// A body that happens to hold the bytes an unknown outcome's encoding
	// has is not one.
	lookalike := hexKey(base)
	complete(lookalike, &cache.Response{Status: 200, Body: []byte("\xa1u\xc3 \x01u\x01"), Header: http.Header{"U": {"\xc3"}}}, ttl)
	expired := hexKey(base)
	complete(expired, unknown, lease/2)
	h.Clock.Advance(2 * lease) // the claim's claim lapses; expired expires
	live := hexKey(base)
	claim(t, h.Store, live, "fp-live")

	got := listAll(t, s, cache.ListQuery{Prefix: base, Held: true, Limit: 2})
	if len(got) != len(held) {
		t.Errorf("held listing has %d records, want %d", len(got), len(held))
	}
	for k, rec := range got {
		if !held[k] {
			t.Errorf("held listing lists %s (%+v), which is not held", k, rec)
			continue
		}
		if !cache.IsHeld(rec) {
			t.Errorf("held listing's %s is %+v, not a held unknown outcome", k, rec)
		}
	}
	if rec := got[lapsed]; rec != nil {
		wantLapsed(t, "the lapsed lock as listed", rec, "fp-lapsed", false)
	} else {
		t.Errorf("held listing misses the lapsed claim")
	}

	all := listAll(t, s, cache.ListQuery{Prefix: base, Limit: 3})
	for k := range held {
		if all[k] == nil {
			t.Errorf("full listing misses held %s", k)
		}
	}
	for what, k := range map[string]string{"completed": done, "lookalike": lookalike, "in flight": live} {
		if all[k] == nil {
			t.Errorf("full listing misses the %s record", what)
		}
	}
	if rec := all[live]; rec != nil && rec.State != cache.StateInFlight {
		t.Errorf("the live claim lists as %+v", rec)
	}
	if all[expired] != nil {
		t.Errorf("an expired record is listed")
	}
	if n := len(all); n != len(held)+3 {
		t.Errorf("full listing has %d records, want %d", n, len(held)+3)
	}

	one := listAll(t, s, cache.ListQuery{Prefix: done[:24]})
	if len(one) != 1 || one[done] == nil || one[done].Response == nil || string(one[done].Response.Body) != "ok" {
		t.Errorf("listing by 24 digits of a key = %v, want that record alone", one)
	}
	if _, err := s.List(ctx, cache.ListQuery{Cursor: "not a cursor of this store \x00"}); !errors.Is(err, cache.ErrBadCursor) {
		t.Errorf("List with a foreign cursor: %v, want ErrBadCursor", err)
	}
}
