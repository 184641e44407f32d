package middleware_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

func TestReplayFidelity(t *testing.T) {
	body := make([]byte, 4<<20)
	for i := range body {
		body[i] = byte(i*31 + i>>8)
	}
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Set-Cookie", "a=1; Path=/")
		h.Add("Set-Cookie", "b=2; HttpOnly")
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Secret-Internal", "never stored")
		h.Set("Connection", "X-Hop")
		h.Set("X-Hop", "hop-by-hop")
		h.Set("Keep-Alive", "timeout=5")
		w.WriteHeader(202)
		for off := 0; off < len(body); off += 64 << 10 { // streamed in chunks with flushes
			_, _ = w.Write(body[off : off+64<<10])
			http.NewResponseController(w).Flush()
		}
	}}
	srv := httptest.NewServer(newHandler(t, newMem(t), func(s *middleware.Settings) { s.IgnoreHeaders = []string{"X-Secret-Internal"} }).Wrap(c))
	defer srv.Close()
	do := func() (*http.Response, []byte) {
		r, _ := http.NewRequest("POST", srv.URL, strings.NewReader("p"))
		r.Header.Set("Idempotency-Key", "fidelity")
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	first, firstBody := do()
	if first.StatusCode != 202 || !bytes.Equal(firstBody, body) || first.ContentLength != -1 {
		t.Fatalf("first: %d, %d bytes, length %d", first.StatusCode, len(firstBody), first.ContentLength)
	}
	resp, got := do()
	if resp.StatusCode != 202 || !bytes.Equal(got, body) {
		t.Fatalf("replay: %d, %d bytes equal=%v", resp.StatusCode, len(got), bytes.Equal(got, body))
	}
	if resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) != 0 {
		t.Fatalf("replay framing: Content-Length %d, Transfer-Encoding %v", resp.ContentLength, resp.TransferEncoding)
	}
	h := resp.Header
	if sc := h.Values("Set-Cookie"); len(sc) != 2 || sc[0] != "a=1; Path=/" || sc[1] != "b=2; HttpOnly" {
		t.Fatalf("Set-Cookie = %q", sc)
	}
	if h.Get("Content-Type") != "application/octet-stream" || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("headers: %v", h)
	}
	for _, gone := range []string{"X-Secret-Internal", "X-Hop", "Keep-Alive"} {
		if h.Get(gone) != "" {
			t.Fatalf("%s was replayed: %v", gone, h)
		}
	}
}

func TestStreamingFlushReachesClient(t *testing.T) {
	second := make(chan struct{})
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = w.Write([]byte("first;"))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush through the recorder: %v", err)
		}
		<-second
		_, _ = w.Write([]byte("second"))
	}}
	srv := httptest.NewServer(newHandler(t, newMem(t)).Wrap(c))
	defer srv.Close()
	r, _ := http.NewRequest("POST", srv.URL, nil)
	r.Header.Set("Idempotency-Key", "stream")
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first;" {
		t.Fatalf("first chunk before the handler finished: %q %v", buf, err)
	}
	close(second)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(rest) != "second" {
		t.Fatalf("rest = %q", rest)
	}
	w := serve(newHandlerSharing(t, srv), req{Key: "stream"})
	_ = w
}

// newHandlerSharing re-requests through the server (helper for readability).
func newHandlerSharing(t *testing.T, srv *httptest.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2, _ := http.NewRequest(r.Method, srv.URL, nil)
		r2.Header = r.Header
		resp, err := srv.Client().Do(r2)
		if err != nil {
			t.Errorf("replay request: %v", err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "first;second" || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay of streamed response: %q replayed=%q", b, resp.Header.Get("Idempotent-Replayed"))
		}
	})
}

// Behind httputil.ReverseProxy, which streams chunked bodies and flushes, the whole
// body is captured (a peer stored nothing above 2 KB here).
func TestCaptureBehindReverseProxy(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, no Content-Length
	upstreamCalls := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls++
		w.Header().Set("Content-Type", "application/json")
		for off := 0; off < len(payload); off += 3000 {
			_, _ = w.Write(payload[off:min(off+3000, len(payload))])
			http.NewResponseController(w).Flush()
		}
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
	srv := httptest.NewServer(newHandler(t, newMem(t)).Wrap(rp))
	defer srv.Close()
	for i := 0; i < 2; i++ {
		r, _ := http.NewRequest("POST", srv.URL+"/x", strings.NewReader(`{"a":1}`))
		r.Header.Set("Idempotency-Key", "rp")
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(b, payload) {
			t.Fatalf("request %d: %d bytes, want %d", i, len(b), len(payload))
		}
		if replayed := resp.Header.Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
			t.Fatalf("request %d: replayed = %v", i, replayed)
		}
	}
	if upstreamCalls != 1 {
		t.Fatalf("upstream calls = %d, want 1", upstreamCalls)
	}
}

// A replay carries what the first answer carried: the headers of a handler that
// wrote nothing (net/http's implicit 200), and trailers, announced or not.
func TestReplayKeepsImplicitHeadersAndTrailers(t *testing.T) {
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/empty":
			w.Header().Set("Location", "/orders/7") // and nothing written
		case "/trailers":
			w.Header().Set("Trailer", "X-Checksum")
			w.WriteHeader(201)
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Checksum", "abc")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		}
	}}
	srv := httptest.NewServer(newHandler(t, newMem(t)).Wrap(c))
	defer srv.Close()
	do := func(path string) (*http.Response, string) {
		r, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader("p"))
		r.Header.Set("Idempotency-Key", "k"+path)
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body) // trailers arrive after the body
		return resp, string(b)
	}
	for i := range 2 {
		resp, _ := do("/empty")
		if resp.StatusCode != 200 || resp.Header.Get("Location") != "/orders/7" || (resp.Header.Get("Idempotent-Replayed") == "true") != (i == 1) {
			t.Fatalf("/empty answer %d: %d Location %q replayed %q", i, resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Idempotent-Replayed"))
		}
		resp, body := do("/trailers")
		if resp.StatusCode != 201 || body != "body" || resp.Trailer.Get("X-Checksum") != "abc" || resp.Trailer.Get("X-Late") != "late" {
			t.Fatalf("/trailers answer %d: %d %q trailers %v", i, resp.StatusCode, body, resp.Trailer)
		}
	}
	if c.Calls.Load() != 2 {
		t.Fatalf("ran %d times", c.Calls.Load())
	}
}
