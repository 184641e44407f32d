package middleware_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
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

// storedHolds reports whether any stored header or body of the record under
// key (as the request q sends it) holds s.
func storedHolds(t *testing.T, h *middleware.Handler, store cache.Store, q req, s string) bool {
	t.Helper()
	rec, err := store.Get(context.Background(), h.StoreKey(q.Build(), q.Key))
	if err != nil {
		t.Fatalf("reading the record: %v", err)
	}
	if rec.Response == nil {
		return false
	}
	for name, vals := range rec.Response.Header {
		if strings.Contains(name, s) || strings.Contains(strings.Join(vals, ","), s) {
			return true
		}
	}
	return strings.Contains(string(rec.Response.Body), s)
}

// The core's outcome-unknown answer, an upstream's answer that echoes the key,
// and a resolution naming the key header are stored without the key; every
// replay carries the replaying request's own key back. A key header of another
// value is the upstream's own and is kept.
func TestStoredAnswersHoldNoRawKey(t *testing.T) {
	store := newMem(t)
	var mode string
	h := newHandler(t, store)
	next := middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
		switch mode {
		case "unknown":
			return middleware.MarkOutcomeUnknown(errors.New("reset after the write"))
		case "echo":
			w.Header().Set("Idempotency-Key", r.Header.Get("Idempotency-Key"))
		case "other":
			w.Header().Set("Idempotency-Key", "the-upstream's-own")
		}
		w.WriteHeader(http.StatusCreated)
		return nil
	})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _ = h.Handle(w, r, next) })
	for _, c := range []struct{ mode, key, wantEcho string }{
		{"unknown", "RAW-unknown-1", "RAW-unknown-1"},
		{"echo", "RAW-echo-1", "RAW-echo-1"},
		{"other", "RAW-other-1", "the-upstream's-own"},
	} {
		mode = c.mode
		q := req{Key: c.key, Body: "x"}
		first := serve(handler, q)
		again := serve(handler, q)
		if again.Header().Get("Idempotent-Replayed") != "true" || again.Header().Get("Idempotency-Key") != c.wantEcho ||
			first.Header().Get("Idempotency-Key") != c.wantEcho {
			t.Fatalf("%s: first %d %v, replay %d %v; want the key header %q on both", c.mode, first.Code, first.Header(), again.Code, again.Header(), c.wantEcho)
		}
		if storedHolds(t, h, store, q, c.key) {
			t.Fatalf("%s: the raw key is in the stored answer", c.mode)
		}
	}
	// A resolution that names the key header: stored as the echo marker.
	mode = "unknown"
	q := req{Key: "RAW-resolved-1", Body: "x"}
	serve(handler, q)
	err := h.Resolve(context.Background(), h.StoreKey(q.Build(), q.Key), &middleware.Resolution{
		Status: 201, Header: http.Header{"Idempotency-Key": {"RAW-resolved-1"}, "Location": {"/charges/1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if storedHolds(t, h, store, q, q.Key) {
		t.Fatal("resolved: the raw key is in the stored answer")
	}
	if w := serve(handler, q); w.Code != 201 || w.Header().Get("Idempotency-Key") != q.Key || w.Header().Get("Location") != "/charges/1" {
		t.Fatalf("resolved replay: %d %v", w.Code, w.Header())
	}
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// compressing is an upstream that compresses as the request asks, as an API
// behind a compressing middleware does: gzip or deflate (zlib, or raw when
// raw is set), br and zstd as an opaque blob.
func compressing(t testing.TB, plain []byte, raw bool) *counter {
	return &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		ae := r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Vary", "Accept-Encoding")
		w.Header().Set("ETag", `"v1"`)
		var out []byte
		switch {
		case strings.Contains(ae, "br"):
			w.Header().Set("Content-Encoding", "br")
			out = []byte("\x0b\x02\x80not really brotli")
		case strings.Contains(ae, "gzip"):
			w.Header().Set("Content-Encoding", "gzip")
			out = gzipped(t, plain)
		case strings.Contains(ae, "deflate"):
			w.Header().Set("Content-Encoding", "deflate")
			var buf bytes.Buffer
			var zw interface {
				Write([]byte) (int, error)
				Close() error
			}
			if raw {
				zw, _ = flate.NewWriter(&buf, flate.BestCompression)
			} else {
				zw = zlib.NewWriter(&buf)
			}
			_, _ = zw.Write(plain)
			_ = zw.Close()
			out = buf.Bytes()
		default:
			out = plain
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(out)
	}}
}

// A retry that does not accept the stored body's coding gets it decoded, with
// its length, and its ETag weakened; one that accepts it gets the bytes stored.
func TestReplayDecodesForRetryWithoutAcceptEncoding(t *testing.T) {
	plain := []byte(strings.Repeat(`{"id":"ch_1","amount":100}`, 200))
	for _, tc := range []struct {
		name, first string
		raw         bool
	}{
		{"gzip", "gzip", false},
		{"deflate (zlib)", "deflate", false},
		{"deflate (raw)", "deflate", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := compressing(t, plain, tc.raw)
			h := newHandler(t, newMem(t)).Wrap(c)
			first := serve(h, req{Key: "k", Body: "x", Header: http.Header{"Accept-Encoding": {tc.first}}})
			if first.Code != 201 || first.Header().Get("Content-Encoding") != tc.first {
				t.Fatalf("first: %d %v", first.Code, first.Header())
			}
			stored := first.Body.Bytes()

			for _, ae := range []string{"", "identity", "br", tc.first + ";q=0", "*;q=0, identity"} {
				hdr := http.Header{}
				if ae != "" {
					hdr.Set("Accept-Encoding", ae)
				}
				w := serve(h, req{Key: "k", Body: "x", Header: hdr})
				if w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" {
					t.Fatalf("Accept-Encoding %q: %d %s", ae, w.Code, w.Body)
				}
				if !bytes.Equal(w.Body.Bytes(), plain) {
					t.Fatalf("Accept-Encoding %q: got %d bytes %q…, want the decoded body", ae, w.Body.Len(), w.Body.Bytes()[:min(20, w.Body.Len())])
				}
				if ce := w.Header().Get("Content-Encoding"); ce != "" {
					t.Fatalf("Accept-Encoding %q: Content-Encoding %q on a decoded body", ae, ce)
				}
				if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(len(plain)) {
					t.Fatalf("Accept-Encoding %q: Content-Length %q, want %d", ae, cl, len(plain))
				}
				if et := w.Header().Get("ETag"); et != `W/"v1"` {
					t.Fatalf("Accept-Encoding %q: ETag %q, want the weak W/\"v1\"", ae, et)
				}
				if v := w.Header().Values("Vary"); len(v) != 1 || v[0] != "Accept-Encoding" {
					t.Fatalf("Accept-Encoding %q: Vary %q", ae, v)
				}
			}
			for _, ae := range []string{tc.first, "br, " + strings.ToUpper(tc.first) + ";q=0.5", "*"} {
				w := serve(h, req{Key: "k", Body: "x", Header: http.Header{"Accept-Encoding": {ae}}})
				if w.Code != 201 || !bytes.Equal(w.Body.Bytes(), stored) || w.Header().Get("Content-Encoding") != tc.first ||
					w.Header().Get("ETag") != `"v1"` {
					t.Fatalf("Accept-Encoding %q: %d %v, stored bytes: %v", ae, w.Code, w.Header(), bytes.Equal(w.Body.Bytes(), stored))
				}
			}
			if n := c.Calls.Load(); n != 1 {
				t.Fatalf("upstream ran %d times", n)
			}
		})
	}
}

// The upstream of a first execution is asked only for codings a retry can be
// given decoded; a body in another one, sent anyway, is replayed to retries
// that accept it and answered 406 to the others.
func TestReplayUndecodableCoding(t *testing.T) {
	var sawAE []string
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		sawAE = append(sawAE, r.Header.Get("Accept-Encoding"))
		w.Header().Set("Content-Encoding", "br") // whatever was asked
		w.WriteHeader(200)
		_, _ = w.Write([]byte("\x0b\x02\x80brotli bytes"))
	}}
	h := newHandler(t, newMem(t)).Wrap(c)
	first := serve(h, req{Key: "k", Body: "x", Header: http.Header{"Accept-Encoding": {"br, zstd;q=0.9, GZIP;q=0.5, x-gzip, deflate"}}})
	if first.Code != 200 || sawAE[0] != "GZIP;q=0.5, x-gzip, deflate" {
		t.Fatalf("first: %d; the upstream was asked for %q", first.Code, sawAE)
	}
	serve(h, req{Key: "k2", Body: "x", Header: http.Header{"Accept-Encoding": {"br, zstd"}}})
	if sawAE[1] != "" {
		t.Fatalf("nothing decodable asked: the upstream got Accept-Encoding %q, want none", sawAE[1])
	}
	if w := serve(h, req{Key: "k", Body: "x", Header: http.Header{"Accept-Encoding": {"br"}}}); w.Code != 200 || w.Header().Get("Content-Encoding") != "br" {
		t.Fatalf("a retry accepting br: %d %v", w.Code, w.Header())
	}
	w := serve(h, req{Key: "k", Body: "x"})
	if w.Code != http.StatusNotAcceptable {
		t.Fatalf("a retry not accepting br: %d %v %q", w.Code, w.Header(), w.Body)
	}
	var p middleware.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Type != middleware.ProblemNotAcceptable || p.OriginalStatus != 200 ||
		!strings.Contains(p.Detail, "Accept-Encoding: br") || w.Header().Get("Content-Encoding") != "" {
		t.Fatalf("problem: %v %+v %v", err, p, w.Header())
	}
	if n := c.Calls.Load(); n != 2 {
		t.Fatalf("upstream ran %d times, want 2 (two keys)", n)
	}
}

// A stored body that decodes to more than max_body (a decompression bomb), or
// does not decode at all, is never expanded in memory: the retry that needs it
// decoded gets 406, the one that accepts it the stored bytes.
func TestReplayDecodingBounded(t *testing.T) {
	const maxBody = 64 << 10
	bomb := gzipped(t, make([]byte, 64<<20)) // 64 MiB of zeros in ~64 KiB
	cases := []struct {
		name, want string
		body       []byte
	}{
		{"bomb", "more than max_body", gzipped(t, make([]byte, maxBody+1))},
		{"corrupt", "do not decode", []byte("\x1f\x8b\x08\x00not gzip at all")},
		{"truncated", "do not decode", gzipped(t, []byte(strings.Repeat("abc", 1000)))[:40]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				w.WriteHeader(201)
				_, _ = w.Write(tc.body)
			}}
			h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.MaxBody = maxBody }).Wrap(c)
			serve(h, req{Key: "k", Body: "x", Header: http.Header{"Accept-Encoding": {"gzip"}}})
			w := serve(h, req{Key: "k", Body: "x"})
			if w.Code != http.StatusNotAcceptable || !strings.Contains(w.Body.String(), tc.want) {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			if a := serve(h, req{Key: "k", Body: "x", Header: http.Header{"Accept-Encoding": {"gzip"}}}); a.Code != 201 || !bytes.Equal(a.Body.Bytes(), tc.body) {
				t.Fatalf("the retry accepting gzip: %d", a.Code)
			}
		})
	}
	// The bound holds however much the body would expand: the allocation a
	// retry costs stays far below what it decodes to.
	if len(bomb) > 1<<20 {
		t.Fatalf("bomb is %d bytes", len(bomb))
	}
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(bomb)
	}}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.MaxBody = 1 << 20 }).Wrap(c)
	serve(h, req{Key: "bomb", Body: "x", Header: http.Header{"Accept-Encoding": {"gzip"}}})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 4 {
		if w := serve(h, req{Key: "bomb", Body: "x"}); w.Code != http.StatusNotAcceptable {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / 4
	if per > 512<<10 { // holding the decoded body would take max_body (1 MiB) at least
		t.Fatalf("a retry of a %d-byte gzip bomb allocated %d bytes", len(bomb), per)
	}
	t.Logf("a retry of a %d-byte gzip bomb (64 MiB decoded, max_body 1 MiB) allocated %d bytes", len(bomb), per)
}
