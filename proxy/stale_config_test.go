package proxy

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// TestReloadOfACopiedConfigUsesItsRoutes: a Go user reloads with a copy
// of the running Config that disables idempotency on /x. The copy carries the
// unexported compiled routes of the original: Reload must compile it again
// (it built the old routes before, seen failing).
func TestReloadOfACopiedConfigUsesItsRoutes(t *testing.T) {
	up := testutil.NewUpstream(t)
	cfg := DefaultConfig()
	cfg.Upstream = up.URL
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), &cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	next := cfg
	next.Routes = []Route{{Path: "/x", Enabled: false, Config: cfg.Config}}
	if err := p.Reload(context.Background(), &next); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := httptest.NewRequest("POST", "/x", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "k1")
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		if w.Code >= 300 || w.Code < 200 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	if n := up.Total(); n != 2 {
		t.Errorf("upstream saw %d requests; want 2 (the reloaded /x route is not idempotent)", n)
	}
}

// TestConfigChangedAfterValidateIsCompiledAgain: a Go user validates, then sets a
// route, then calls New: the route must count (it was ignored without a
// word before, seen failing).
func TestConfigChangedAfterValidateIsCompiledAgain(t *testing.T) {
	up := testutil.NewUpstream(t)
	cfg := DefaultConfig()
	cfg.Upstream = up.URL
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Routes = []Route{{Path: "/x", Enabled: false, Config: cfg.Config}}
	p, err := New(context.Background(), &cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 2 {
		r := httptest.NewRequest("POST", "/x", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
	}
	if n := up.Total(); n != 2 {
		t.Errorf("upstream saw %d requests; want 2 (the /x route set before New is not idempotent)", n)
	}
}
