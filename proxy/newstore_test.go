package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/internal/trivialstore"
)

// withStore adds k to the registry until the test ends: the one line a new
// store takes in stores.Drivers. Not with t.Parallel.
func withStore(t *testing.T, k stores.Entry) {
	kinds := stores.Drivers
	stores.Drivers = append(kinds[:len(kinds):len(kinds)], k)
	t.Cleanup(func() { stores.Drivers = kinds })
}

// A store is its package and one line in the registry: the trivial store
// (internal/trivialstore: a map, one setting), added as that line and nowhere
// else, is a store of the proxy. --store trivial://… selects it; its setting
// is a flag, a variable and a file key, in --help, checked by name, refused
// with another store; the proxy opens it and replays from it, and its setting
// reaches it (one key at most: a second is 503).
func TestANewStoreIsOneLineInTheRegistry(t *testing.T) {
	withStore(t, stores.Entry{Driver: trivialstore.Driver})
	up := testutil.NewUpstream(t)
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	none := env(nil)

	cfg, err := ParseArgs([]string{"--upstream", up.URL, "--store", "trivial://one", "--trivial-max-keys", "1"}, none, io.Discard)
	if err != nil {
		t.Fatalf("--store trivial://one --trivial-max-keys 1: %v", err)
	}
	if got := cfg.Stores.Of("trivial").(*trivialstore.Settings).MaxKeys; got != 1 {
		t.Fatalf("trivial_max_keys = %d, want 1", got)
	}
	fromEnv, err := ParseArgs([]string{"--upstream", up.URL}, env(map[string]string{"IDEMPROXY_STORE": "trivial://two", "IDEMPROXY_TRIVIAL_MAX_KEYS": "7"}), io.Discard)
	if err != nil || fromEnv.Stores.Of("trivial").(*trivialstore.Settings).MaxKeys != 7 {
		t.Fatalf("from variables: %v", err)
	}
	file := testutil.TempFile(t, "idemproxy.yaml", "upstream: "+up.URL+"\nstore: trivial://three\ntrivial_max_keys: 3\n")
	fromFile, err := ParseArgs([]string{"--config", file}, none, io.Discard)
	if err != nil || fromFile.Stores.Of("trivial").(*trivialstore.Settings).MaxKeys != 3 {
		t.Fatalf("from the config file: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "trivial://one", "--trivial-max-keys", "0"}, "--trivial-max-keys: must be at least 1, got 0"},
		{[]string{"--store", "trivial://", "--trivial-max-keys", "2"}, `--store: "trivial://": want trivial://NAME`},
		{[]string{"--store", "memory", "--trivial-max-keys", "2"}, "--trivial-max-keys: applies to a trivial store; store is memory"},
		{[]string{"--store", "trivial://one", "--redis-prefix", "x:"}, "--redis-prefix: applies to a redis store; store is trivial"},
		{[]string{"--store", "trivia://one"}, "trivial://"},
	} {
		_, err := ParseArgs(append([]string{"--upstream", up.URL}, c.args...), none, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want %q", c.args, err, c.want)
		}
	}
	var help bytes.Buffer
	Usage(&help)
	words := strings.Join(strings.Fields(help.String()), " ") // --help wraps its lines
	for _, want := range []string{"--trivial-max-keys value trivial store: most keys kept default 100; env IDEMPROXY_TRIVIAL_MAX_KEYS", "or trivial://NAME (a map in this process, for tests)"} {
		if !strings.Contains(words, want) {
			t.Errorf("--help lacks %q", want)
		}
	}

	p, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewServer(p)
	defer srv.Close()
	post := func(key string) testutil.Response {
		t.Helper()
		r, err := testutil.Do(context.Background(), strings.TrimPrefix(srv.URL, "http://"), testutil.Request{Target: "/charges", Key: key, Body: "x"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := post("a"); r.Status != 201 || r.Replayed {
		t.Fatalf("first: %+v", r)
	}
	if r := post("a"); r.Status != 201 || !r.Replayed || up.Count("a") != 1 {
		t.Fatalf("retry: %+v, upstream ran it %d times; want the replay", r, up.Count("a"))
	}
	if r := post("b"); r.Status != 503 || up.Count("b") != 0 {
		t.Fatalf("a second key with trivial_max_keys 1: %+v; want 503, not forwarded", r)
	}
}
