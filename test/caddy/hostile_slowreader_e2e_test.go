package caddy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Inside real Caddy, as in the proxy: a client that never reads a large first
// answer is cut off at body_read_timeout (Caddy's response writers pass the
// deadline through), the answer is stored in full, and the retry replays it.
// Before, the key stayed locked (409) for as long as the client kept its
// connection open.
func TestCaddyStalledReaderIsCut(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewUpstream(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(globalOptions(dir)+":0 {\n\tidempotency {\n\t\tbody_read_timeout 2s\n\t}\n\treverse_proxy %s\n}\n",
		strings.TrimPrefix(up.URL, "http://"))
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := runCaddy(t, caddyBinary(t), dir, path)
	req := "POST /big?kib=8192 HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: stall\r\nContent-Length: 2\r\n\r\n{}"
	testutil.RawConn(t, p.Addr, req) // never read
	testutil.Eventually(t, 10*time.Second, "the first execution upstream", func() bool { return up.Count("stall") == 1 })
	var retry testutil.Response
	testutil.Eventually(t, 15*time.Second, "the replay after the stalled reader was cut", func() bool {
		retry = testutil.RawExchange(t, p.Addr, req)
		return retry.Status != 409
	})
	if retry.Status != 201 || !retry.Replayed || len(retry.Body) != 8<<20 || up.Count("stall") != 1 {
		t.Fatalf("the retry: %d replayed=%v %d bytes; upstream ran %d", retry.Status, retry.Replayed, len(retry.Body), up.Count("stall"))
	}
}
