package proxy_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// A client whose first request accepted gzip and whose retry does not (curl
// without --compressed, a script) reads the retry's replay: the built proxy
// decodes the stored gzip body for it. An upstream answering br whatever it is
// asked gets a 406 for such a retry, never bytes it cannot read.
func TestE2EReplayDecodedForRetryWithoutAcceptEncoding(t *testing.T) {
	skipShort(t)
	plain := strings.Repeat(`{"id":"ch_1","amount":100}`, 100)
	var mu sync.Mutex
	var asked []string
	up := testutil.NewUpstream(t, testutil.Reply(func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/br" {
			w.Header().Set("Content-Encoding", "br")
			w.WriteHeader(201)
			_, _ = io.WriteString(w, "\x0b\x02\x80brotli")
			return
		}
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.WriteHeader(201)
			_, _ = io.WriteString(w, plain)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(201)
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, plain)
		_ = zw.Close()
	}))
	p := start(t, "--upstream", up.URL)

	first := p.Send(t, testutil.Request{Target: "/charges", Key: "k1", Body: "{}", Header: map[string]string{"Accept-Encoding": "gzip, br"}})
	if first.Status != 201 || first.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first: %d %v", first.Status, first.Header)
	}
	mu.Lock()
	firstAsked := asked[0]
	mu.Unlock()
	if firstAsked != "gzip" {
		t.Fatalf("the upstream was asked for Accept-Encoding %q, want gzip alone (br cannot be decoded for a retry)", firstAsked)
	}
	raw := func(target, key, extra string) testutil.Response {
		return testutil.RawExchange(t, p.Addr, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\n%sContent-Length: 2\r\nConnection: close\r\n\r\n{}",
			target, p.Addr, key, extra))
	}
	retry := raw("/charges", "k1", "") // no Accept-Encoding at all
	if retry.Status != 201 || !retry.Replayed || retry.Body != plain || retry.Header.Get("Content-Encoding") != "" ||
		retry.Header.Get("Content-Length") != fmt.Sprint(len(plain)) || retry.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("retry without Accept-Encoding: %d %v %q…", retry.Status, retry.Header, retry.Body[:min(len(retry.Body), 16)])
	}
	gz := raw("/charges", "k1", "Accept-Encoding: gzip\r\n")
	if gz.Header.Get("Content-Encoding") != "gzip" || gz.Body != first.Body {
		t.Fatalf("retry accepting gzip: %v, stored bytes: %v", gz.Header, gz.Body == first.Body)
	}
	zr, err := gzip.NewReader(bytes.NewReader([]byte(gz.Body)))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); string(b) != plain {
		t.Fatal("the gzip replay does not decode to the body")
	}

	p.Send(t, testutil.Request{Target: "/br", Key: "k2", Body: "{}", Header: map[string]string{"Accept-Encoding": "br"}})
	if r := raw("/br", "k2", "Accept-Encoding: br\r\n"); r.Status != 201 || r.Header.Get("Content-Encoding") != "br" {
		t.Fatalf("br retry accepting br: %d %v", r.Status, r.Header)
	}
	if r := raw("/br", "k2", ""); r.Status != 406 || !strings.Contains(r.Body, "not-acceptable") || !strings.Contains(r.Body, "Accept-Encoding: br") {
		t.Fatalf("br retry not accepting br: %d %q", r.Status, r.Body)
	}
	if n := up.Total(); n != 2 {
		t.Fatalf("the upstream ran %d times, want 2", n)
	}
}
