package middleware_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

// A record keeps its first request (from Settings.RequestInfo), the
// replays that answered its retries, and what held and settled it.
func TestRecordKeepsRequestAndHistory(t *testing.T) {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	infos := 0 // the hook's calls: only a new claim's info is built
	h, err := middleware.New(store, func(s *middleware.Settings) {
		s.RequestInfo = func(r *http.Request) middleware.RequestInfo {
			infos++
			return middleware.RequestInfo{ID: "req-42", Client: "192.0.2.9:4000", Route: "/orders/"}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	send := func(key, path string, next middleware.Next) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", path+"?token=secret", strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("Authorization", "Bearer sk_live_secret")
		if err := h.Handle(w, r, next); err != nil {
			t.Fatal(err)
		}
		return w
	}
	storeKey := func(key string) string {
		r := httptest.NewRequest("POST", "/orders/1", nil)
		r.Header.Set("Authorization", "Bearer sk_live_secret")
		return h.StoreKey(r, key)
	}
	ok := middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, _ = io.WriteString(w, "created")
		return nil
	})
	for range 3 {
		send("k-replayed", "/orders/1", ok)
	}
	rec, err := store.Get(context.Background(), storeKey("k-replayed"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cache.InfoOf(rec)
	if err != nil || info == nil {
		t.Fatalf("info %v, %v", info, err)
	}
	if info.Method != "POST" || info.Path != "/orders/1" || info.Route != "/orders/" || info.RequestID != "req-42" ||
		info.Client != "192.0.2.9:4000" || info.FirstSeen.IsZero() || len(info.Events) != 0 {
		t.Fatalf("info %+v", info)
	}
	if infos != 1 {
		t.Fatalf("RequestInfo called %d times for one execution and two replays; want 1 (a replay builds none)", infos)
	}
	if rec.Replays != 2 || rec.LastReplay.IsZero() {
		t.Fatalf("replays %d, last %v; want 2", rec.Replays, rec.LastReplay)
	}
	// Nothing of the headers, the query or the body.
	for _, secret := range []string{"sk_live", "secret", "token"} {
		if strings.Contains(rec.Response.Info, secret) {
			t.Fatalf("the stored info holds %q: %q", secret, rec.Response.Info)
		}
	}

	lost := middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
		return middleware.MarkOutcomeUnknown(errors.New("reset"))
	})
	send("k-held", "/orders/2", lost)
	key := storeKey("k-held")
	if err := h.Resolve(context.Background(), key, &middleware.Resolution{Status: 201, Body: []byte("done")}); err != nil {
		t.Fatal(err)
	}
	if w := send("k-held", "/orders/2", ok); w.Code != 201 || w.Body.String() != "done" {
		t.Fatalf("retry after the resolve: %d %q", w.Code, w.Body)
	}
	rec, err = store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	info, _ = cache.InfoOf(rec)
	if info == nil || info.Path != "/orders/2" || len(info.Events) != 2 ||
		info.Events[0].Kind != cache.EventHeld || info.Events[0].By != cache.ByNoAnswer ||
		info.Events[1].Kind != cache.EventResolved || info.Events[1].By != cache.ByOperator {
		t.Fatalf("held then resolved: %+v", info)
	}
	if rec.Replays != 1 {
		t.Fatalf("replays of the resolved answer: %d, want 1", rec.Replays)
	}
}
