package middleware_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

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
