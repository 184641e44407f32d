package testutil

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Upstream is an HTTP server behind the proxy under test that counts the
// requests that reach it: in total, under a name (CountBy; by default the
// Idempotency-Key) and by "METHOD path" (the path as it arrived, escaped).
//
// Unless Reply answers, it answers as the path says: /slow?ms=N sends the
// request's name on Started and sleeps N ms; /block sends it on Started and
// waits for Release (or for the client to go); /fail answers 500; /big?kib=N
// answers 201 with N KiB of body; anything else answers 201 "executed NAME #N
// with BODY" and X-Execution: N, N being the request's number under its name.
type Upstream struct {
	*httptest.Server
	// Started receives the name of each request to /slow or /block when it
	// arrives (it holds 100).
	Started chan string
	// Release lets one /block request answer per send, and every one once it is
	// closed (the test's end closes it).
	Release chan struct{}

	by    func(*http.Request) string
	reply func(w http.ResponseWriter, r *http.Request, n int)

	mu    sync.Mutex
	total int
	names map[string]int
	paths map[string]int
}

// UpstreamOption configures an Upstream.
type UpstreamOption func(*Upstream)

// PassBlocked lets every /block request that arrives from now on answer at
// once, until the returned stop is called (it waits for the helper to end).
func (u *Upstream) PassBlocked() (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-u.Started:
				select {
				case u.Release <- struct{}{}:
				case <-done:
					return
				}
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-exited }
}

// CountBy names each request for Count (the Idempotency-Key when not given).
func CountBy(name func(*http.Request) string) UpstreamOption {
	return func(u *Upstream) { u.by = name }
}

// ByHeader names a request by the values of the headers it carries, in the
// order given, joined by a space: ByHeader("Authorization", "Idempotency-Key").
func ByHeader(names ...string) func(*http.Request) string {
	return func(r *http.Request) string {
		var vals []string
		for _, n := range names {
			if v := r.Header.Get(n); v != "" {
				vals = append(vals, v)
			}
		}
		return strings.Join(vals, " ")
	}
}

// ByMethod names a request by its method.
func ByMethod(r *http.Request) string { return r.Method }

// Reply answers every request with fn instead; n is the request's number under
// its name, and r.Body can still be read.
func Reply(fn func(w http.ResponseWriter, r *http.Request, n int)) UpstreamOption {
	return func(u *Upstream) { u.reply = fn }
}

// NewUpstream starts an Upstream, closed when the test ends.
func NewUpstream(t testing.TB, opts ...UpstreamOption) *Upstream {
	u := &Upstream{
		Started: make(chan string, 100),
		Release: make(chan struct{}),
		by:      ByHeader("Idempotency-Key"),
		names:   map[string]int{},
		paths:   map[string]int{},
	}
	for _, o := range opts {
		o(u)
	}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() {
		select {
		case <-u.Release:
		default:
			close(u.Release)
		}
		u.Close()
	})
	return u
}

// NewDeliveries starts an Upstream for webhook deliveries: it answers each
// POST 200 "processed #N", N counting the POSTs (Count("POST")), and anything
// else (a health check through the proxy) 200 with no body.
func NewDeliveries(t testing.TB) *Upstream {
	return NewUpstream(t, CountBy(ByMethod), Reply(func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Method == http.MethodPost {
			fmt.Fprintf(w, "processed #%d", n)
		}
	}))
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	name := u.by(r)
	u.mu.Lock()
	u.total++
	u.names[name]++
	n := u.names[name]
	u.paths[r.Method+" "+r.URL.EscapedPath()]++
	u.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	if u.reply != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.reply(w, r, n)
		return
	}
	switch r.URL.Path {
	case "/block":
		u.Started <- name
		select {
		case <-u.Release:
		case <-r.Context().Done(): // its proxy was killed, or gave up
			return
		}
	case "/slow":
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		u.Started <- name
		time.Sleep(time.Duration(ms) * time.Millisecond)
	case "/fail":
		w.WriteHeader(http.StatusInternalServerError)
		return
	case "/big":
		kib, _ := strconv.Atoi(r.URL.Query().Get("kib"))
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, strings.Repeat("x", kib<<10))
		return
	}
	w.Header().Set("X-Execution", strconv.Itoa(n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "executed %s #%d with %s", name, n, body)
}

// Count is how many requests named name reached the upstream.
func (u *Upstream) Count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.names[name]
}

// Path is how many requests reached the upstream as "METHOD path".
func (u *Upstream) Path(methodPath string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.paths[methodPath]
}

// Paths is a copy of the counts by "METHOD path", for messages.
func (u *Upstream) Paths() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.paths)
}

// Total is how many requests reached the upstream.
func (u *Upstream) Total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.total
}
