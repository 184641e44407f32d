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

// caddyIdempotencySite runs Caddy with one plain-HTTP site whose idempotency
// directive has the block given (Caddyfile lines), a reverse_proxy to upstream,
// and /healthz; it returns the site's host:port once it answers.
func caddyIdempotencySite(t *testing.T, block, upstream string) string {
	t.Helper()
	bin := caddyBinary(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(globalOptions(dir)+":0 {\n\trespond /healthz 200\n\tidempotency {\n%s\t}\n\treverse_proxy %s\n}\n",
		block, upstream)
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return runCaddy(t, bin, dir, path).Addr
}

// A client that declares a body and stalls, inside real Caddy: answered at
// body_read_timeout, and its connection closed then. The standalone proxy did
// not (net/http drained the rest of a body below 256 KiB with no deadline before
// it sent the answer); Caddy 2.11 did, its read_idle_timeout machinery keeping
// the expired deadline for that drain, and must go on doing so with the core's
// own Connection: close.
func TestCaddyStalledBodyAnsweredAndClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewDeliveries(t)
	const timeout = time.Second
	addr := caddyIdempotencySite(t, "\t\tbody_read_timeout 1s\n", up.URL)
	for _, tc := range []struct{ name, head, first string }{
		{"content-length", "POST /pay HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: s1\r\nContent-Length: 100000", "0123456789"},
		{"chunked", "POST /pay HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: s2\r\nTransfer-Encoding: chunked", "a\r\n0123456789\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			conn := testutil.RawConn(t, addr, tc.head+"\r\n\r\n"+tc.first)
			resp, body, closed := testutil.AnswerThenClose(t, conn, began.Add(timeout+4*time.Second))
			if resp.StatusCode != 400 || !strings.Contains(body, "body-unreadable") {
				t.Fatalf("stalled body: %d %q, want 400 body-unreadable", resp.StatusCode, body)
			}
			if !resp.Close {
				t.Errorf("the answer does not say Connection: close")
			}
			if took := closed.Sub(began); took < timeout-100*time.Millisecond {
				t.Fatalf("answered and closed after %v, before body_read_timeout", took)
			}
		})
	}
	if n := up.Count("POST"); n != 0 {
		t.Fatalf("the upstream got %d requests, want none", n)
	}
}
