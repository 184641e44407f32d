package caddy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// memoryReloads is a changed value of every memory store subdirective, for
// TestCaddyReloadKeepsTheMemoryStore (which fails when one is missing).
var memoryReloads = []struct{ name, value string }{
	{"max_records", "2000000"},
	{"max_bytes", "1GiB"},
}

// `caddy reload` with each memory store subdirective changed in turn keeps the
// process's memory store: a key completed before replays without reaching the
// upstream, a duplicate of a request in flight across the reload gets 409,
// and once that request finishes its answer replays.
func TestCaddyReloadKeepsTheMemoryStore(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	for _, f := range stores.Fields(memstore.Driver.Settings()) {
		found := false
		for _, c := range memoryReloads {
			found = found || c.name == f.Name
		}
		if !found {
			t.Errorf("memoryReloads lacks %s", f.Name)
		}
	}
	bin := caddyBinary(t)
	dir := t.TempDir()
	up := testutil.NewUpstream(t)
	var settings []string
	caddyfile := func() string {
		block := ""
		if len(settings) > 0 {
			block = " {\n\t\t\t" + strings.Join(settings, "\n\t\t\t") + "\n\t\t}"
		}
		return fmt.Sprintf(globalOptions(dir)+":0 {\n\tidempotency {\n\t\tstore memory%s\n\t\tlock_ttl 10s\n\t}\n\treverse_proxy %s\n}\n",
			block, strings.TrimPrefix(up.URL, "http://"))
	}
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(caddyfile()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := runCaddy(t, bin, dir, cfgPath)
	post := func(path, key string) testutil.Response {
		return p.Send(t, testutil.Request{Target: path, Key: key, Body: "x", Host: testutil.LoadBalancedHost})
	}
	type answer struct {
		testutil.Response
		err error
	}
	inflight := func(key string) <-chan answer {
		done := make(chan answer, 1)
		addr := p.Addr // a reload moves p to the new config's listener
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := testutil.Do(ctx, addr, testutil.Request{Target: "/block", Key: key, Body: "x", Host: testutil.LoadBalancedHost})
			done <- answer{r, err}
		}()
		return done
	}
	for _, c := range memoryReloads {
		done, held := "done-"+c.name, "held-"+c.name
		if r := post("/charges", done); r.Status != 201 || r.Replayed {
			t.Fatalf("%s: first: %+v", c.name, r)
		}
		first := inflight(held)
		<-up.Started

		settings = append(settings, c.name+" "+c.value)
		if err := os.WriteFile(cfgPath, []byte(caddyfile()), 0o644); err != nil {
			t.Fatal(err)
		}
		reload(t, p, bin, dir, cfgPath)
		if r := post("/charges", done); !r.Replayed || up.Count(done) != 1 {
			t.Errorf("%s: a key completed before the reload: %d replayed=%v, executions %d; want a replay", c.name, r.Status, r.Replayed, up.Count(done))
		}
		select {
		case r := <-inflight(held):
			if r.err != nil || r.Status != 409 {
				t.Fatalf("%s: a duplicate of the request in flight across the reload: %+v; want 409", c.name, r)
			}
		case <-up.Started:
			up.Release <- struct{}{}
			t.Fatalf("%s: a duplicate of the request in flight across the reload ran; want 409", c.name)
		}
		up.Release <- struct{}{}
		if r := <-first; r.err != nil || r.Status != 201 || r.Replayed {
			t.Fatalf("%s: the request in flight across the reload: %+v", c.name, r)
		}
		if r := post("/block", held); !r.Replayed || up.Count(held) != 1 {
			t.Fatalf("%s: its retry: %d replayed=%v, executions %d; want a replay", c.name, r.Status, r.Replayed, up.Count(held))
		}
	}
}
