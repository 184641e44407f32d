package middleware_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

func TestRequestBodyPassedOnIntact(t *testing.T) {
	body := bytes.Repeat([]byte{0, 1, 2, 0xfe}, 1<<18)
	var got []byte
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(204)
	}}
	h := newHandler(t, newMem(t)).Wrap(c)
	r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
	r.Header.Set("Idempotency-Key", "b")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 204 || !bytes.Equal(got, body) {
		t.Fatalf("next saw %d bytes (equal=%v), status %d", len(got), bytes.Equal(got, body), w.Code)
	}
	w = httptest.NewRecorder()
	r = httptest.NewRequest("POST", "/", bytes.NewReader(body))
	r.Header.Set("Idempotency-Key", "b")
	h.ServeHTTP(w, r)
	if w.Code != 204 || w.Header().Get("Content-Length") != "" || w.Body.Len() != 0 {
		t.Fatalf("204 replay: %d, Content-Length %q, body %d bytes", w.Code, w.Header().Get("Content-Length"), w.Body.Len())
	}
}

// The core reads the body, which is when net/http answers "Expect: 100-continue";
// next must not see the expectation again (a proxy would forward it and relay a
// second 100 Continue). Without a key the request passes through untouched.
func TestExpectContinueConsumedWithTheBody(t *testing.T) {
	var seen []string
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Expect"))
		w.WriteHeader(201)
	}}
	h := newHandler(t, newMem(t)).Wrap(c)
	expect := http.Header{"Expect": {"100-Continue"}}
	if w := serve(h, req{Key: "x1", Body: "a", Header: expect}); w.Code != 201 {
		t.Fatalf("with a key: %d", w.Code)
	}
	if w := serve(h, req{Body: "a", Header: expect}); w.Code != 201 {
		t.Fatalf("without a key: %d", w.Code)
	}
	if len(seen) != 2 || seen[0] != "" || seen[1] != "100-Continue" {
		t.Fatalf("Expect seen by next: %q, want [\"\" \"100-Continue\"]", seen)
	}
}

// A declared Content-Length reserves no memory before the bytes arrive: a client
// that declares 8 MiB and sends 10 bytes costs about 10 bytes, not 8 MiB.
func TestDeclaredLengthReservesNothing(t *testing.T) {
	h := newHandler(t, newMem(t)).Wrap(&counter{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 8 {
		r := httptest.NewRequest("POST", "/charge", strings.NewReader("0123456789"))
		r.ContentLength = 8 << 20 // declared, never sent
		r.Header.Set("Idempotency-Key", "declared")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			t.Fatalf("a body shorter than declared: %d, want 400", w.Code)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("8 requests declaring 8 MiB each allocated %d bytes", got)
	}
}

// A scope entry Cookie:NAME scopes keys by one cookie, for cookie-authenticated
// APIs: two sessions never share a key's response; other cookies do not matter.
func TestCookieScope(t *testing.T) {
	c := &counter{}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.ScopeHeaders = []string{"Cookie:session"} }).Wrap(c)
	cookie := func(v string) http.Header { return http.Header{"Cookie": {v}} }
	serve(h, req{Key: "k", Header: cookie("session=alice; theme=dark")})
	if w := serve(h, req{Key: "k", Header: cookie("theme=light; session=alice")}); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same session, other cookies: not replayed (%d)", w.Code)
	}
	if w := serve(h, req{Key: "k", Header: cookie("session=bob")}); w.Header().Get("Idempotent-Replayed") == "true" {
		t.Fatal("bob got alice's response")
	}
	if c.Calls.Load() != 2 {
		t.Fatalf("ran %d times, want 2 (alice, bob)", c.Calls.Load())
	}
	if _, err := middleware.New(newMem(t), func(s *middleware.Settings) { s.ScopeHeaders = []string{"Cookie:"} }); err == nil {
		t.Fatal("Cookie: without a name accepted")
	}
}
