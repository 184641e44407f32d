package caddy_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// During a Redis outage inside real Caddy, everything goes through Caddy's
// logger: every line Caddy writes is one of its JSON log entries (go-redis's
// own lines, "redis: … pool.go: …", went to stderr outside it), and an
// expected error (the store unavailable) carries no stack trace (it carried
// 2.2 KB of one).
func TestCaddyStoreOutageLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	srv := redistest.Start(t)
	dir := t.TempDir()
	p := startCaddy(t, bin, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tstore %s\n\t}\n\trespond /charges* `{\"id\":1}` 201\n}\n", srv.URL()))
	if r := p.Post(t, "/charges", "before", "x"); r.Status != 201 {
		t.Fatalf("before the outage: %d %s", r.Status, r.Body)
	}
	srv.Stop()
	for i := range 3 {
		if r := p.Post(t, "/charges", fmt.Sprint("during-", i), "x"); r.Status != 503 || !strings.Contains(r.Body, "store-unavailable") {
			t.Fatalf("during the outage: %d %s; want 503 store-unavailable", r.Status, r.Body)
		}
	}
	// Caddy's log reaches p.Logs through a pipe: wait for the third line.
	testutil.Eventually(t, 10*time.Second, "three store unavailable lines", func() bool {
		return strings.Count(p.Logs.String(), `"msg":"idempotency store unavailable"`) >= 3
	})
	unavailable := 0
	for _, line := range strings.Split(strings.TrimSpace(p.Logs.String()), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("a line outside Caddy's logger: %s", line)
			continue
		}
		if _, ok := entry["stacktrace"]; ok {
			t.Errorf("a stack trace (%d bytes) on %q", len(line), entry["msg"])
		}
		if entry["msg"] == "idempotency store unavailable" {
			unavailable++
		}
	}
	if unavailable != 3 {
		t.Errorf("%d store unavailable lines, want 3", unavailable)
	}
}

// A held key leads from the module's warning to the request, as the proxy's
// does: the "outcome unknown" line carries the request's path, request id
// and client, the handler's name (what ?handler= picks), and unknown_hold as Go writes it ("24h0m0s"; it read 86400,
// with none of the three), and {http.idempotency.key_hash} puts the same
// key_hash in Caddy's access log (with the request id as uuid) as the line
// and the held list of Caddy's admin API print, on the first execution and
// its retries (whose header directive reads it too).
func TestCaddyHeldKeyJoinsTheLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	reset := testutil.NewRawUpstream(t, "reset") // reads the request, then resets: outcome unknown
	dir := t.TempDir()
	p := startCaddy(t, bin, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tlog\n\tlog_append key_hash {http.idempotency.key_hash}\n\tidempotency {\n\t\tname charges\n\t}\n"+
		"\theader ?X-Key-Hash {http.idempotency.key_hash}\n\treverse_proxy %s\n}\n", reset.Addr()))
	var retry testutil.Response
	for range 2 { // the first execution, and its retry (replayed)
		if retry = p.Post(t, "/charges?token=secret", "k-held", "x"); retry.Status != 502 || !strings.Contains(retry.Body, "outcome-unknown") {
			t.Fatalf("%d %s; want the held outcome-unknown answer", retry.Status, retry.Body)
		}
	}
	type entry struct {
		Logger, Msg, Path, Client, Handler string
		KeyHash                            string `json:"key_hash"`
		RequestID                          string `json:"request_id"`
		UUID                               string `json:"uuid"`
		UnknownHold                        any    `json:"unknown_hold"`
	}
	var warning *entry
	var access []entry
	testutil.Eventually(t, 10*time.Second, "the warning and two access log lines", func() bool {
		warning, access = nil, nil
		for _, line := range strings.Split(p.Logs.String(), "\n") {
			var e entry
			if json.Unmarshal([]byte(line), &e) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(e.Msg, "idempotency outcome unknown: the key is held"):
				warning = &e
			case strings.HasPrefix(e.Logger, "http.log.access"):
				access = append(access, e)
			}
		}
		return warning != nil && len(access) == 2
	})
	if warning.UnknownHold != "24h0m0s" || warning.Path != "/charges" || warning.Client != "127.0.0.1" || warning.RequestID == "" || len(warning.KeyHash) != 12 || warning.Handler != "charges" {
		t.Errorf("the outcome unknown line: %+v; want unknown_hold 24h0m0s, path /charges, client 127.0.0.1, a request_id, a key_hash and handler charges", *warning)
	}
	for i, a := range access {
		if a.KeyHash != warning.KeyHash {
			t.Errorf("access log line %d: key_hash %q, want the warning's %q", i, a.KeyHash, warning.KeyHash)
		}
	}
	if got := retry.Header.Get("X-Key-Hash"); got != warning.KeyHash {
		t.Errorf("the retry's X-Key-Hash header: %q, want the warning's key_hash %q", got, warning.KeyHash)
	}
	if access[0].UUID != warning.RequestID {
		t.Errorf("the first execution's access log line: uuid %q, want the warning's request_id %q", access[0].UUID, warning.RequestID)
	}
	code, body := admin(t, dir, "GET", "/idempotency/keys?state=held", "", "")
	if code != 200 || !strings.Contains(body, `"key_hash": "`+warning.KeyHash+`"`) {
		t.Errorf("GET /idempotency/keys?state=held: %d %s; want the key_hash %s", code, body, warning.KeyHash)
	}
}
