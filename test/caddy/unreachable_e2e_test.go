package caddy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// A reload through Caddy's admin API (/load) to a config whose store does
// not answer is refused, for every store that can be unreachable, and the
// running config keeps serving; with start_unreachable a Redis that does not
// answer is accepted, and tracked requests get 503 until it does. (Before,
// Caddy accepted the unreachable Redis with a warning, and every tracked
// request got 503.)
func TestCaddyReloadToAnUnreachableStoreIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	dir := t.TempDir()
	config := func(name, store, extra string) string {
		return globalOptions(dir) + fmt.Sprintf(":0 {\n\tidempotency {\n\t\tstore %s\n%s\t}\n\theader X-Config %s\n\trespond /charges* `{\"id\":1}` 201\n}\n", store, extra, name)
	}
	p := startCaddyEnv(t, bin, dir, config("first", "memory", ""),
		// DynamoDB's endpoint: nothing listens on port 1.
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=x", "AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:1")
	serving := func(want string) testutil.Response {
		t.Helper()
		r := p.Post(t, "/charges", "", "x")
		if got := r.Header.Get("X-Config"); got != want {
			t.Fatalf("the config serving: %q, want %q", got, want)
		}
		return r
	}
	serving("first")
	for _, c := range []struct{ store, title string }{
		{"redis://127.0.0.1:1", "Redis"},
		{"postgres postgres://idem@127.0.0.1:1/idem", "PostgreSQL"},
		{"dynamodb idem_unreachable", "DynamoDB"},
	} {
		code, body := load(t, dir, config("second", c.store, ""))
		if code == 200 || !strings.Contains(body, c.title+" unreachable") {
			t.Errorf("%s: /load to a config whose store does not answer: %d %s; want it refused, naming the store", c.title, code, body)
		}
		serving("first")
		if c.title == "Redis" {
			continue
		}
		// Only Redis can start unreachable: the others are still refused.
		if code, body := load(t, dir, config("second", c.store, "\t\tstart_unreachable\n")); code == 200 {
			t.Errorf("%s with start_unreachable: /load accepted (%s); want it refused", c.title, body)
		}
		serving("first")
	}
	// Nor does Caddy start on it: caddy validate provisions as caddy run does.
	other := t.TempDir()
	path := filepath.Join(other, "Caddyfile")
	if err := os.WriteFile(path, []byte(config("second", "redis://127.0.0.1:1", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := testutil.Run(t, bin, []string{"validate", "--config", path, "--adapter", "caddyfile"}); code == 0 || !strings.Contains(out, "Redis unreachable") {
		t.Errorf("caddy validate on an unreachable Redis: exit %d\n%s", code, out)
	}
	loadOK(t, p, dir, config("degraded", "redis://127.0.0.1:1", "\t\tstart_unreachable\n"))
	r := p.Post(t, "/charges", "k1", "x")
	if r.Header.Get("X-Config") != "degraded" || r.Status != 503 || !strings.Contains(r.Body, "store-unavailable") {
		t.Fatalf("a tracked request on the degraded config: %d %s (config %q); want 503 store-unavailable", r.Status, r.Body, r.Header.Get("X-Config"))
	}
}

// start_unreachable is each handler's own: two handlers on one store (one
// pooled store), one with start_unreachable and one without, make a config
// whose store does not answer refused whichever is provisioned first, and
// one whose store answers accepted either way; and a reload to a strict
// handler on a store a running config's lenient handler opened is refused
// while the store does not answer. Before, the first handler to
// open the store decided for both: with the lenient one first, the strict
// one started on an unreachable Redis.
func TestCaddyStartUnreachableIsEachHandlers(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	dir := t.TempDir()
	config := func(name, store, first string) string {
		handler := map[string]string{
			"lenient": fmt.Sprintf("\t\tidempotency /lenient/* {\n\t\t\tstore %s\n\t\t\tstart_unreachable\n\t\t}\n", store),
			"strict":  fmt.Sprintf("\t\tidempotency /strict/* {\n\t\t\tstore %s\n\t\t}\n", store),
		}
		second := map[string]string{"lenient": "strict", "strict": "lenient"}[first]
		return globalOptions(dir) + ":0 {\n\troute {\n" + handler[first] + handler[second] +
			fmt.Sprintf("\t\theader X-Config %s\n\t\trespond `{\"id\":1}` 201\n\t}\n}\n", name)
	}
	p := startCaddy(t, bin, dir, globalOptions(dir)+":0 {\n\theader X-Config first\n\trespond `{\"id\":1}` 201\n}\n")
	serving := func(path, want string) testutil.Response {
		t.Helper()
		r := p.Post(t, path, "", "x")
		if got := r.Header.Get("X-Config"); got != want {
			t.Fatalf("the config serving: %q, want %q", got, want)
		}
		return r
	}
	serving("/x", "first")
	for _, first := range []string{"lenient", "strict"} {
		if code, body := load(t, dir, config(first, "redis://127.0.0.1:1", first)); code == 200 || !strings.Contains(body, "Redis unreachable") {
			t.Errorf("an unreachable Redis, the %s handler provisioned first: /load %d %s; want it refused (the strict handler's)", first, code, body)
			loadOK(t, p, dir, globalOptions(dir)+":0 {\n\theader X-Config first\n\trespond `{\"id\":1}` 201\n}\n")
		}
		serving("/x", "first")
	}
	// A running config's lenient handler opened the store: a reload to a
	// strict one on the same store checks it, and is refused.
	down := "redis://127.0.0.1:1"
	loadOK(t, p, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tstore %s\n\t\tstart_unreachable\n\t}\n\theader X-Config degraded\n\trespond `{}` 201\n}\n", down))
	if code, body := load(t, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tstore %s\n\t}\n\theader X-Config strict\n\trespond `{}` 201\n}\n", down)); code == 200 || !strings.Contains(body, "Redis unreachable") {
		t.Errorf("a reload to a strict handler on the store a degraded config opened: /load %d %s; want it refused", code, body)
	} else {
		serving("/x", "degraded")
	}
	redisURL := redistest.Start(t).URL()
	for _, first := range []string{"lenient", "strict"} {
		loadOK(t, p, dir, config(first, redisURL, first))
		for _, path := range []string{"/lenient/c", "/strict/c"} {
			if r := p.Post(t, path, "k-"+first+path, "x"); r.Header.Get("X-Config") != first || r.Status != 201 {
				t.Errorf("a Redis that answers, the %s handler first: %s: %d %s (config %q); want 201", first, path, r.Status, r.Body, r.Header.Get("X-Config"))
			}
		}
	}
}
