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
