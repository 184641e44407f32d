package proxy_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// reloadConfig writes text to the config file at path, as an operator editing it.
func reloadConfig(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

type answer struct {
	testutil.Response
	err error
}

// inflight sends q to p in the background; its answer, or the error, comes on
// the channel.
func inflight(p *testutil.Proc, q testutil.Request) <-chan answer {
	done := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := testutil.Do(ctx, p.Addr, q)
		done <- answer{r, err}
	}()
	return done
}

// waitLog waits until the process has logged want n times.
func waitLog(t *testing.T, p *testutil.Proc, want string, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, want+" in the log", func() bool {
		return strings.Count(p.Logs.String(), want) >= n
	})
}

// SIGHUP re-reads the file: a slow request in flight across it gets its answer,
// a record made before it still replays after (the memory store is kept), a
// route added takes effect, a setting that needs a restart is said so, and a
// broken file keeps the old configuration with one line naming file and line.
func TestE2EReloadOnSIGHUP(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	path := testutil.TempFile(t, "idemproxy.yaml", "upstream: "+up.URL+"\n")
	p := start(t, "--config", path)

	if r := p.Post(t, "/charges", "before", "x"); r.Status != 201 || r.Replayed {
		t.Fatalf("first: %+v", r)
	}
	if r := p.Send(t, testutil.Request{Target: "/orders", Body: "x"}); r.Status != 201 {
		t.Fatalf("an unkeyed POST before the reload: %+v", r)
	}
	done := inflight(p, testutil.KeyedPost("/slow?ms=1500", "inflight", "x"))
	<-up.Started

	reloadConfig(t, path, "upstream: "+up.URL+"\nidle_timeout: 5m\nroutes:\n  - path: /orders\n    require_key: true\n")
	p.Signal(t, syscall.SIGHUP)
	if r := <-done; r.err != nil || r.Status != 201 || r.Replayed {
		t.Fatalf("the request in flight across SIGHUP: %+v", r)
	}
	waitLog(t, p, `"msg":"configuration reloaded"`, 1)
	if !regexp.MustCompile(`take effect only at a restart.*"settings":"idle_timeout"`).MatchString(p.Logs.String()) {
		t.Fatalf("a changed idle_timeout is not said to need a restart:\n%s", p.Logs)
	}
	if r := p.Post(t, "/charges", "before", "x"); !r.Replayed || up.Count("before") != 1 {
		t.Fatalf("a record made before the reload: %+v, executions %d", r, up.Count("before"))
	}
	if r := p.Post(t, "/slow?ms=1500", "inflight", "x"); !r.Replayed {
		t.Fatalf("the request stored across the reload does not replay: %+v", r)
	}
	if r := p.Send(t, testutil.Request{Target: "/orders", Body: "x"}); r.Status != 400 {
		t.Fatalf("the route added by the reload (require_key) is not applied: %+v", r)
	}

	reloadConfig(t, path, "upstream: "+up.URL+"\nunknown_hold: 2days\n")
	p.Signal(t, syscall.SIGHUP)
	waitLog(t, p, "configuration not reloaded", 1)
	logs := p.Logs.String()
	if !strings.Contains(logs, path) || !strings.Contains(logs, "line 2") || !strings.Contains(logs, "unknown_hold") {
		t.Fatalf("a broken file is not named with its line and key:\n%s", logs)
	}
	if r := p.Send(t, testutil.Request{Target: "/orders", Body: "x"}); r.Status != 400 {
		t.Fatalf("after a broken file, the old configuration is not kept: %+v", r)
	}
	if r := p.Post(t, "/charges", "before", "x"); !r.Replayed {
		t.Fatalf("after a broken file: %+v", r)
	}
	p.Stop(t)
}

// A Redis store reopened by a reload (a Redis setting changed: a new client on
// the same server) keeps what the server holds: a key completed before it
// replays, a duplicate of the request in flight on the old client gets 409
// (its claim is in Redis), and the old client is closed only after that request
// has stored its response: the retry on the new client replays it.
func TestE2EReloadReopensRedisAfterInFlight(t *testing.T) {
	skipShort(t)
	rs := redistest.Start(t)
	up := testutil.NewUpstream(t)
	path := testutil.TempFile(t, "idemproxy.yaml", "upstream: "+up.URL+"\nstore: "+rs.URL()+"\n")
	p := start(t, "--config", path)
	if r := p.Post(t, "/charges", "before", "x"); r.Status != 201 || r.Replayed {
		t.Fatalf("first: %+v", r)
	}
	done := inflight(p, testutil.KeyedPost("/block", "across", "x"))
	<-up.Started
	reloadConfig(t, path, "upstream: "+up.URL+"\nstore: "+rs.URL()+"\nredis_wait_timeout: 300ms\n")
	p.Signal(t, syscall.SIGHUP)
	waitLog(t, p, `"store":"reopened"`, 1)
	if r := p.Post(t, "/charges", "before", "x"); !r.Replayed || up.Count("before") != 1 {
		t.Fatalf("a key completed before the reload, on the new client: %+v, executions %d", r, up.Count("before"))
	}
	select {
	case r := <-inflight(p, testutil.KeyedPost("/block", "across", "x")):
		if r.err != nil || r.Status != 409 {
			t.Fatalf("a duplicate on the new client of the request in flight on the old: %+v; want 409", r)
		}
	case <-up.Started:
		up.Release <- struct{}{}
		t.Fatalf("a duplicate on the new client ran beside the request in flight on the old")
	}
	up.Release <- struct{}{}
	if r := <-done; r.err != nil || r.Status != 201 {
		t.Fatalf("the request in flight on the replaced client: %+v", r)
	}
	if r := p.Post(t, "/block", "across", "x"); !r.Replayed || up.Count("across") != 1 {
		t.Fatalf("its retry on the new client: %+v, executions %d", r, up.Count("across"))
	}
	p.Stop(t)
}

// A reload builds the configuration from the same flags and variables: they
// still win over the file as it is now.
func TestE2EReloadKeepsFlagsAndVariables(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	path := testutil.TempFile(t, "idemproxy.yaml", "upstream: "+up.URL+"\nrequire_key: false\n")
	p := testutil.StartIdemproxy(t, binary(t), []string{"--config", path, "--retry-after", "7s"}, "IDEMPROXY_REQUIRE_KEY=true")
	if r := p.Send(t, testutil.Request{Target: "/x", Body: "x"}); r.Status != 400 {
		t.Fatalf("before: the variable's require_key: %+v", r)
	}
	reloadConfig(t, path, "upstream: "+up.URL+"\nrequire_key: false\nretry_after: 1s\nroutes:\n  - path: /y\n")
	p.Signal(t, syscall.SIGHUP)
	waitLog(t, p, `"msg":"configuration reloaded"`, 1)
	if r := p.Send(t, testutil.Request{Target: "/y", Body: "x"}); r.Status != 400 {
		t.Fatalf("after the reload, the variable no longer wins over the file: %+v", r)
	}
	done := inflight(p, testutil.KeyedPost("/block", "busy", "x"))
	<-up.Started
	if r := p.Post(t, "/block", "busy", "x"); r.Status != 409 || r.Header.Get("Retry-After") != "7" {
		t.Fatalf("after the reload, the flag no longer wins over the file: %+v", r)
	}
	up.Release <- struct{}{}
	<-done
}

// A key held for reconciling across a reload is settled by the new
// configuration's worker: the replaced one stops, the job stays in the kept
// store.
func TestE2EReloadKeepsReconciling(t *testing.T) {
	skipShort(t)
	up := newReconcileUpstream(t)
	cfg := "upstream: " + up.URL + `
routes:
  - path: /charges
    reconcile: GET /lookup?key={key}
    reconcile_headers: [Authorization]
    reconcile_delay: 200ms
    reconcile_max_delay: 400ms
    reconcile_attempts: 50
    reconcile_timeout: 1s
`
	path := testutil.TempFile(t, "idemproxy.yaml", cfg)
	p := start(t, "--config", path)
	post := func() testutil.Response {
		return p.Post(t, "/charges", "flip-r", `{"amount":1}`, "Authorization", "Bearer flip-r")
	}
	if r := post(); r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
		t.Fatalf("first answer %d %s, want outcome-unknown", r.Status, r.Body)
	}
	testutil.Eventually(t, 10*time.Second, "a reconcile attempt before the reload", func() bool {
		_, lookups := up.counts("flip-r")
		return lookups > 0
	})
	reloadConfig(t, path, strings.Replace(cfg, "reconcile_timeout: 1s", "reconcile_timeout: 2s", 1))
	p.Signal(t, syscall.SIGHUP)
	waitLog(t, p, `"msg":"configuration reloaded"`, 1)
	up.flip()
	testutil.Eventually(t, 15*time.Second, "the held key settled after the reload", func() bool {
		r := post()
		return r.Status == 200 && r.Replayed && r.Body == `{"id":"ch_flip-r","status":"succeeded"}`
	})
	if executed, _ := up.counts("flip-r"); executed != 1 {
		t.Fatalf("executed %d times, want once", executed)
	}
	p.Stop(t)
}
