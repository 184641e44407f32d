package caddymodule

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/internal/trivialstore"
)

// storeModule is a new module of the store named name.
func storeModule(t *testing.T, name string) *Store {
	t.Helper()
	k, ok := stores.Lookup(name)
	if !ok {
		t.Fatalf("no store %q", name)
	}
	return newStore(k)
}

var registerTrivial sync.Once

// withTrivialStore adds the trivial store to the registry until the test
// ends: the one line a new store takes in stores.Drivers. The init of this
// package registers a module for each store of that list; the list is read
// before a test can add to it, so the test registers the trivial store's
// module as init does (once: Caddy keeps its modules). Not with t.Parallel.
func withTrivialStore(t *testing.T) {
	k := stores.Entry{Driver: trivialstore.Driver}
	kinds := stores.Drivers
	stores.Drivers = append(kinds[:len(kinds):len(kinds)], k)
	t.Cleanup(func() { stores.Drivers = kinds })
	registerTrivial.Do(func() { registerStore(k) })
}

// A store is its package and one line in the registry: the trivial store
// (internal/trivialstore: a map, one setting) is a Caddy store module, with
// its Caddyfile form, its setting in its block and in its JSON (checked by
// name), and handlers that share it replay from it; its setting reaches it
// (one key at most: a second is 503).
func TestANewStoreIsACaddyStoreModule(t *testing.T) {
	withTrivialStore(t)
	for _, tc := range []struct {
		name, input, want, wantErr string
	}{
		{name: "name and URL", input: "store trivial trivial://one", want: `{"store":{"type":"trivial","url":"trivial://one"}}`},
		{name: "URL alone", input: "store trivial://one {\nmax_keys 1\n}", want: `{"store":{"type":"trivial","url":"trivial://one","max_keys":1}}`},
		{name: "no URL", input: "store trivial", wantErr: "missing the trivial URL"},
		{name: "bad setting", input: "store trivial://one {\nmax_keys 0\n}", wantErr: "trivial store: max_keys: must be at least 1"},
		{name: "unknown option", input: "store trivial://one {\nprefix x\n}", wantErr: `unknown trivial store option "prefix"`},
		{name: "unknown store", input: "store trivia x", wantErr: "trivial <url>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("idempotency {\n" + tc.input + "\n}"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(&h)
			if !jsonEqual(t, got, []byte(tc.want)) {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	if err := json.Unmarshal([]byte(`{"url":"trivial://x","max_keys":"many"}`), storeModule(t, "trivial")); err == nil || !strings.Contains(err.Error(), "max_keys") {
		t.Fatalf("a bad max_keys in JSON: %v", err)
	}

	cfg := `{"store":{"type":"trivial","url":"trivial://caddy","max_keys":1}}`
	a, _, _ := provision(t, cfg)
	b, _, _ := provision(t, cfg)
	next := &counting{}
	if c := serve(a, call{key: "k"}, next); c.code != 201 || c.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %+v", c)
	}
	if c := serve(b, call{key: "k"}, next); c.header.Get("Idempotent-Replayed") != "true" || next.calls.Load() != 1 {
		t.Fatalf("second handler on the same store: %+v, %d runs", c, next.calls.Load())
	}
	if c := serve(a, call{key: "other"}, next); c.code != 503 || next.calls.Load() != 1 {
		t.Fatalf("a second key with max_keys 1: %+v, %d runs; want 503, not run", c, next.calls.Load())
	}
}
