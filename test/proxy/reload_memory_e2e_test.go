package proxy_test

import (
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// memoryReloads is a changed value of every memory store setting, for
// TestE2EReloadKeepsTheMemoryStore (which fails when a setting is missing).
var memoryReloads = map[string]string{
	"memory_max_records": "2000000",
	"memory_max_bytes":   "1GiB",
}

// A reload that changes a memory store setting keeps the store: a completed
// key replays without reaching the upstream, a duplicate of a request in
// flight across the reload gets 409, and once that request finishes its answer
// replays. Before, any memory_* change swapped in an empty store: the
// completed key ran again and the duplicate ran beside the first.
func TestE2EReloadKeepsTheMemoryStore(t *testing.T) {
	skipShort(t)
	for _, f := range conf.Fields(reflect.TypeFor[memstore.Settings]()) {
		if _, ok := memoryReloads["memory_"+f.Name]; !ok {
			t.Errorf("memoryReloads lacks memory_%s", f.Name)
		}
	}
	for name, value := range memoryReloads {
		t.Run(name, func(t *testing.T) {
			up := testutil.NewUpstream(t)
			path := testutil.TempFile(t, "idemproxy.yaml", "upstream: "+up.URL+"\n")
			p := start(t, "--config", path)
			if r := p.Post(t, "/charges", "done", "x"); r.Status != 201 || r.Replayed {
				t.Fatalf("first: %+v", r)
			}
			first := inflight(p, testutil.KeyedPost("/block", "held", "x"))
			<-up.Started

			reloadConfig(t, path, "upstream: "+up.URL+"\n"+name+": "+value+"\n")
			p.Signal(t, syscall.SIGHUP)
			waitLog(t, p, `"msg":"configuration reloaded"`, 1)
			if logs := p.Logs.String(); !strings.Contains(logs, `"store":"kept"`) ||
				!strings.Contains(logs, `applied to the running store; its records and in-flight claims kept","settings":"`+name+`"`) {
				t.Errorf("the reload did not keep the store, or does not say it applied %s to it:\n%s", name, logs)
			}
			if r := p.Post(t, "/charges", "done", "x"); !r.Replayed || up.Count("done") != 1 {
				t.Errorf("a key completed before the reload: %d replayed=%v, executions %d; want a replay", r.Status, r.Replayed, up.Count("done"))
			}
			select {
			case r := <-inflight(p, testutil.KeyedPost("/block", "held", "x")):
				if r.err != nil || r.Status != 409 {
					t.Fatalf("a duplicate of the request in flight across the reload: %+v; want 409", r)
				}
			case <-up.Started: // it reached the upstream beside the first
				up.Release <- struct{}{}
				t.Fatalf("a duplicate of the request in flight across the reload ran (executions %d); want 409", up.Count("held"))
			}
			up.Release <- struct{}{}
			if r := <-first; r.err != nil || r.Status != 201 || r.Replayed {
				t.Fatalf("the request in flight across the reload: %+v", r)
			}
			if r := p.Post(t, "/block", "held", "x"); !r.Replayed || up.Count("held") != 1 {
				t.Fatalf("the retry of the request in flight across the reload: %d replayed=%v, executions %d; want a replay", r.Status, r.Replayed, up.Count("held"))
			}
			p.Stop(t)
		})
	}
}
