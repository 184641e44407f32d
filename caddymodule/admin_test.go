package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

// The admin API picks the handler by name, the newest config's first; with
// one store any handler serves, with more the caller must name one. Stores
// are told apart by their identity (the pool's key), not by how they are
// listed: two prefixes on one Redis are two stores.
func TestAdminPicksTheHandler(t *testing.T) {
	var g handlerRegistry
	if _, _, err := g.pick(""); err == nil {
		t.Fatal("no handler: picked one")
	}
	oldA := &Handler{Name: "a", storeName: "memory", storeID: "memory"}
	newA := &Handler{Name: "a", storeName: "memory", storeID: "memory"}
	b := &Handler{Name: "b", storeName: "memory", storeID: "memory"}
	g.add(oldA)
	g.add(b)
	g.add(newA) // a reload's: provisioned before the old config's cleanup
	if h, _, _ := g.pick("a"); h != newA {
		t.Fatal("by name: not the newest config's")
	}
	if h, _, err := g.pick(""); err != nil || h != newA {
		t.Fatalf("one store, no name: %v", err)
	}
	g.remove(oldA)
	g.add(&Handler{Name: "r", storeName: "redis redis://127.0.0.1:6379", storeID: "redis\x00redis://127.0.0.1:6379"})
	if _, _, err := g.pick(""); err == nil || !strings.Contains(err.Error(), "?handler=NAME") {
		t.Fatalf("two stores, no name: %v; want to be told to name one", err)
	}
	if _, _, err := g.pick("c"); err == nil || !strings.Contains(err.Error(), `"a" (memory)`) {
		t.Fatalf("an unknown name: %v; want the handlers listed", err)
	}
	if got := len(g.list()); got != 3 {
		t.Fatalf("list: %d handlers, want 3", got)
	}
	var one handlerRegistry
	one.add(&Handler{Name: "x", storeName: "redis redis://h:6379", storeID: "redis\x00redis://h:6379\x00prefix=x:"})
	one.add(&Handler{Name: "y", storeName: "redis redis://h:6379", storeID: "redis\x00redis://h:6379\x00prefix=y:"})
	if _, _, err := one.pick(""); err == nil {
		t.Fatal("two prefixes on one Redis, no name: picked one; want to be told to name one")
	}
}

// gatedStore is a memory store whose Get waits for the test, and fails once
// the store is closed.
type gatedStore struct {
	*memstore.Store
	entered, release chan struct{}
	closed           *atomic.Bool
}

func (g *gatedStore) Get(ctx context.Context, key string) (*cache.Record, error) {
	close(g.entered)
	<-g.release
	if g.closed.Load() {
		return nil, errors.New("store closed")
	}
	return g.Store.Get(ctx, key)
}

// An admin operation pins the store it uses: a reload that lets the store go
// meanwhile (the handler leaves the registry, the pool destructs the store)
// closes it only once the operation is done. Before, the store closed under
// the operation.
func TestAdminPinsTheStore(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("ab", 32)
	if _, _, err := mem.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var closed atomic.Bool
	g := &gatedStore{Store: mem, entered: make(chan struct{}), release: make(chan struct{}), closed: &closed}
	ps := &pooledStore{Store: g, pooled: &pooled{close: func() error { closed.Store(true); return nil }}}
	core, err := middleware.New(ps)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Name: "pin-test", store: ps, storeName: "memory", core: core}
	registry.add(h)
	t.Cleanup(func() { registry.remove(h) })

	rec := httptest.NewRecorder()
	done := make(chan error, 1)
	go func() {
		done <- Admin{}.serve(rec, httptest.NewRequest(http.MethodGet, "/idempotency/keys?handler=pin-test&hash="+key[:12], nil))
	}()
	<-g.entered
	registry.remove(h) // a reload: the handler leaves, and its config lets the store go
	if err := ps.Destruct(); err != nil {
		t.Fatal(err)
	}
	if closed.Load() {
		t.Error("the store closed under the admin operation")
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK {
		t.Errorf("GET /idempotency/keys: %d %s; want the record", rec.Code, rec.Body)
	}
	if !closed.Load() {
		t.Error("the store was not closed once the operation was done")
	}
	// A handler still listed whose store is closed (Caddy cleans a config's
	// modules up in no set order) is not used.
	registry.add(h)
	rec = httptest.NewRecorder()
	if err := (Admin{}).serve(rec, httptest.NewRequest(http.MethodGet, "/idempotency/keys?handler=pin-test&hash="+key[:12], nil)); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "closed by a config reload") {
		t.Errorf("a handler whose store is closed: %d %s; want 503", rec.Code, rec.Body)
	}
}

// A POST to the admin API must be Content-Type: application/json (415
// otherwise), as idemproxy's admin listener has it: a web page can make a
// browser send a form or text/plain POST to a loopback port without a
// preflight, and resolve a held key to what it chose. Before, Caddy's
// resolve took any body.
func TestAdminPostNeedsJSON(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("cd", 32)
	if _, _, err := mem.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := mem.Complete(ctx, key, "t", &cache.Record{Response: &cache.Response{Status: 502, Unknown: true}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	core, err := middleware.New(mem)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Name: "json-test", store: mem, storeName: "memory", core: core}
	registry.add(h)
	t.Cleanup(func() { registry.remove(h) })
	body := `{"status":201,"body":"{\"id\":7}"}`
	for _, path := range []string{"/idempotency/resolve", "/idempotency/release"} {
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
			req := httptest.NewRequest(http.MethodPost, path+"?handler=json-test&hash="+key[:12], strings.NewReader(body))
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			rec := httptest.NewRecorder()
			if err := (Admin{}).serve(rec, req); err != nil {
				t.Fatal(err)
			}
			if rec.Code != http.StatusUnsupportedMediaType || !strings.Contains(rec.Body.String(), "application/json") {
				t.Errorf("POST %s with Content-Type %q: %d %s; want 415", path, ct, rec.Code, rec.Body)
			}
		}
	}
	if rec, err := mem.Get(ctx, key); err != nil || rec.Response == nil || !rec.Response.Unknown {
		t.Fatalf("after the refused POSTs: %+v, %v; want the key still held", rec, err)
	}
	req := httptest.NewRequest(http.MethodPost, "/idempotency/resolve?handler=json-test&hash="+key[:12], strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	rec := httptest.NewRecorder()
	if err := (Admin{}).serve(rec, req); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"resolved": true`) {
		t.Errorf("POST /idempotency/resolve as JSON: %d %s; want it resolved", rec.Code, rec.Body)
	}
}

// downStore is a memory store whose Ping fails: a store that does not answer.
type downStore struct{ *memstore.Store }

func (downStore) Ping(context.Context) error {
	return errors.New("dial tcp 192.0.2.1:6379: connection refused")
}

// GET /idempotency/readyz is idemproxy's /readyz under Caddy's admin API:
// 200 when the stores answer, 503 with the store's error when one does not;
// ?handler=NAME asks that handler's store alone.
func TestAdminReadyz(t *testing.T) {
	mem, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := middleware.New(mem)
	if err != nil {
		t.Fatal(err)
	}
	up := &Handler{Name: "up", store: mem, storeName: "memory", storeID: "memory", core: core}
	down := &Handler{Name: "down", store: downStore{mem}, storeName: "redis redis://192.0.2.1:6379", storeID: "redis\x00redis://192.0.2.1:6379", core: core}
	registry.mu.Lock()
	saved := registry.handlers
	registry.handlers = nil // the other tests' handlers stay out of this one
	registry.mu.Unlock()
	t.Cleanup(func() {
		registry.mu.Lock()
		registry.handlers = saved
		registry.mu.Unlock()
	})
	get := func(target string) (int, string) {
		rec := httptest.NewRecorder()
		if err := (Admin{}).serve(rec, httptest.NewRequest(http.MethodGet, target, nil)); err != nil {
			t.Fatal(err)
		}
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/idempotency/readyz"); code != 503 || !strings.Contains(body, "no idempotency handler") {
		t.Errorf("no handler: %d %s; want 503", code, body)
	}
	registry.add(up)
	registry.add(down)
	for _, c := range []struct {
		target string
		code   int
		says   string
	}{
		{"/idempotency/readyz", 503, "connection refused"},
		{"/idempotency/readyz?handler=up", 200, `"status": "ready"`},
		{"/idempotency/readyz?handler=down", 503, `"status": "store unavailable"`},
		{"/idempotency/readyz?handler=other", 503, "no handler named"},
	} {
		if code, body := get(c.target); code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("GET %s: %d %s; want %d with %q", c.target, code, body, c.code, c.says)
		}
	}
	registry.remove(down)
	if code, body := get("/idempotency/readyz"); code != 200 {
		t.Errorf("every store answers: %d %s; want 200", code, body)
	}
}
