// Package testutil holds the helpers the project's tests share: free loopback
// ports, polling for a condition, and a keyed POST served in process.
package testutil

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreeAddr returns a loopback address with a port free at the time of the call.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Eventually polls cond every 2 ms until it holds, and fails the test if it does
// not within d. It is for conditions that other goroutines make true; it never
// moves a clock.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Post serves a keyed POST /charge with body through h, in process.
func Post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/charge", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Answer is what PostWith got back.
type Answer struct {
	Status   int
	Replayed bool // Idempotent-Replayed: true
	Body     string
}

// PostWith POSTs body to url with the headers (a JSON Content-Type unless they
// set one), over a real socket, within 10 s.
func PostWith(t testing.TB, url, body string, headers map[string]string) Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Answer{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b)}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes: a child process's
// output, read by the test while it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
