package caddy_test

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Inside real Caddy, behind encode: a body the upstream gzipped for the first
// request is stored as sent, and a retry without Accept-Encoding gets it
// decoded; a retry that accepts gzip gets the stored bytes.
func TestCaddyReplayDecodedForRetryWithoutAcceptEncoding(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	plain := strings.Repeat(`{"id":"ch_1","amount":100}`, 100)
	asked := make(chan string, 4)
	up := testutil.NewUpstream(t, testutil.Reply(func(w http.ResponseWriter, r *http.Request, n int) {
		asked <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(201)
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, plain)
		_ = zw.Close()
	}))
	addr := caddySite(t, fmt.Sprintf("\tencode gzip\n\treverse_proxy %s\n", strings.TrimPrefix(up.URL, "http://"))).Addr
	raw := func(extra string) testutil.Response {
		return testutil.RawExchange(t, addr, fmt.Sprintf("POST /charges HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: ce1\r\n%sContent-Length: 2\r\nConnection: close\r\n\r\n{}", addr, extra))
	}
	first := raw("Accept-Encoding: gzip, br\r\n")
	if first.Status != 201 || first.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first: %d %v", first.Status, first.Header)
	}
	if a := <-asked; a != "gzip" {
		t.Fatalf("the upstream was asked for Accept-Encoding %q, want gzip alone", a)
	}
	retry := raw("")
	if retry.Status != 201 || !retry.Replayed || retry.Body != plain || retry.Header.Get("Content-Encoding") != "" {
		t.Fatalf("retry without Accept-Encoding: %d %v %q…", retry.Status, retry.Header, retry.Body[:min(16, len(retry.Body))])
	}
	if gz := raw("Accept-Encoding: gzip\r\n"); !gz.Replayed || gz.Header.Get("Content-Encoding") != "gzip" || gz.Body != first.Body {
		t.Fatalf("retry accepting gzip: %v, stored bytes: %v", gz.Header, gz.Body == first.Body)
	}
	if n := up.Total(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
}
