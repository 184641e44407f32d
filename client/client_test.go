package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/client"
	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// api is a real server behind the real middleware. fail decides, per attempt
// (1-based), what the upstream does instead of executing: a status to answer
// without executing, or 0 to execute.
type api struct {
	srv        *httptest.Server
	attempts   atomic.Int64
	executions atomic.Int64
	mu         sync.Mutex
	keys       []string
	fail       func(attempt int64) int
	delay      time.Duration
}

func newAPI(t *testing.T, fail func(attempt int64) int) *api {
	a := &api{fail: fail}
	store, _ := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	h, err := middleware.New(store)
	if err != nil {
		t.Fatal(err)
	}
	a.srv = httptest.NewServer(h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.attempts.Add(1)
		a.mu.Lock()
		a.keys = append(a.keys, r.Header.Get("Idempotency-Key"))
		a.mu.Unlock()
		if a.fail != nil {
			if code := a.fail(n); code != 0 {
				w.WriteHeader(code)
				return
			}
		}
		time.Sleep(a.delay)
		body, _ := io.ReadAll(r.Body)
		e := a.executions.Add(1)
		w.WriteHeader(201)
		fmt.Fprintf(w, "execution %d of %s", e, body)
	})))
	t.Cleanup(a.srv.Close)
	return a
}

func fast(opts ...client.Option) []client.Option {
	return append([]client.Option{client.WithBackoff(time.Millisecond, 5*time.Millisecond)}, opts...)
}

func post(t *testing.T, c *http.Client, url, body string, hdr ...string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// loseFirstResponse performs the first attempt for real, then reports a connection
// error: the request ran, its response was lost.
type loseFirstResponse struct {
	base  http.RoundTripper
	calls atomic.Int64
}

func (l *loseFirstResponse) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if l.calls.Add(1) == 1 && err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("read tcp: connection reset by peer")
	}
	return resp, err
}

func TestLostResponseRetriedOnce(t *testing.T) {
	a := newAPI(t, nil)
	c := &http.Client{Transport: client.New(&loseFirstResponse{base: http.DefaultTransport}, fast()...)}
	resp, body, err := post(t, c, a.srv.URL, "pay 10")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 201 || body != "execution 1 of pay 10" || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("got %d %q replayed=%q", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
	}
	if a.executions.Load() != 1 {
		t.Fatalf("executions = %d, want 1", a.executions.Load())
	}
	if a.keys[0] != a.keys[len(a.keys)-1] || !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(a.keys[0]) {
		t.Fatalf("keys %v: want one UUIDv4 for every attempt", a.keys)
	}
}

func TestRetriesOnGatewayErrors(t *testing.T) {
	for _, code := range []int{429, 502, 503, 504} {
		a := newAPI(t, func(n int64) int {
			if n < 3 {
				return code
			}
			return 0
		})
		c := &http.Client{Transport: client.New(nil, fast()...)}
		resp, body, err := post(t, c, a.srv.URL, "x")
		if err != nil || resp.StatusCode != 201 || body != "execution 1 of x" {
			t.Fatalf("%d: %v %v %q", code, err, resp, body)
		}
		if a.attempts.Load() != 3 || a.executions.Load() != 1 {
			t.Fatalf("%d: attempts %d executions %d", code, a.attempts.Load(), a.executions.Load())
		}
	}
}

func TestConflictHonoursRetryAfter(t *testing.T) {
	a := newAPI(t, nil)
	a.delay = 300 * time.Millisecond
	const key = "caller-chosen-key"
	first := make(chan string)
	go func() { // another process is already running this key
		_, b, _ := post(t, http.DefaultClient, a.srv.URL, "x", "Idempotency-Key", key)
		first <- b
	}()
	for a.attempts.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	c := &http.Client{Transport: client.New(nil, fast()...)}
	start := time.Now()
	resp, body, err := post(t, c, a.srv.URL, "x", "Idempotency-Key", key)
	if err != nil || resp.StatusCode != 201 || resp.Header.Get("Idempotent-Replayed") != "true" || body != <-first {
		t.Fatalf("%v %v %q", err, resp, body)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("retried after %v; the 409's Retry-After (1s) was not honoured", waited)
	}
	if a.executions.Load() != 1 {
		t.Fatalf("executions = %d", a.executions.Load())
	}
	for _, k := range a.keys {
		if k != key {
			t.Fatalf("caller's key replaced: %v", a.keys)
		}
	}
}

func TestNeverRetriesFinalAnswers(t *testing.T) {
	a := newAPI(t, nil)
	c := &http.Client{Transport: client.New(nil, fast()...)}
	post(t, c, a.srv.URL, "first", "Idempotency-Key", "k")
	before := a.attempts.Load()
	// 422: same key, different body.
	resp, _, err := post(t, c, a.srv.URL, "second", "Idempotency-Key", "k")
	if err != nil || resp.StatusCode != 422 {
		t.Fatalf("%v %v", err, resp)
	}
	// 400: invalid key.
	resp, _, err = post(t, c, a.srv.URL, "x", "Idempotency-Key", "a,b")
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("%v %v", err, resp)
	}
	if a.attempts.Load() != before {
		t.Fatalf("422/400 reached the upstream or were retried")
	}
	b := newAPI(t, func(int64) int { return 400 })
	post(t, c, b.srv.URL, "x")
	if b.attempts.Load() != 1 {
		t.Fatalf("a 400 from the upstream was retried: %d attempts", b.attempts.Load())
	}
}

func TestGivesUp(t *testing.T) {
	a := newAPI(t, func(int64) int { return 503 })
	c := &http.Client{Transport: client.New(nil, fast(client.WithMaxAttempts(4))...)}
	resp, _, err := post(t, c, a.srv.URL, "x")
	if err != nil || resp.StatusCode != 503 || a.attempts.Load() != 4 {
		t.Fatalf("%v %v attempts %d, want the last 503 after 4 attempts", err, resp, a.attempts.Load())
	}
	b := newAPI(t, func(int64) int { return 503 })
	// The time budget stops it long before 1000 attempts of up to 20ms each.
	c = &http.Client{Transport: client.New(nil, client.WithBackoff(20*time.Millisecond, 20*time.Millisecond), client.WithMaxElapsed(100*time.Millisecond), client.WithMaxAttempts(1000))}
	start := time.Now()
	post(t, c, b.srv.URL, "x")
	if n, took := b.attempts.Load(), time.Since(start); n < 2 || n >= 1000 || took > 2*time.Second {
		t.Fatalf("%d attempts in %v with a 100ms budget", n, took)
	}
}

func TestContextCancelStopsRetrying(t *testing.T) {
	a := newAPI(t, func(int64) int { return 503 })
	c := &http.Client{Transport: client.New(nil, client.WithBackoff(time.Hour, time.Hour), client.WithMaxElapsed(2*time.Hour))}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", a.srv.URL, strings.NewReader("x"))
	start := time.Now()
	if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

func TestBodiesAndMethods(t *testing.T) {
	a := newAPI(t, func(n int64) int {
		if n == 1 {
			return 502
		}
		return 0
	})
	c := &http.Client{Transport: client.New(nil, fast()...)}
	// A body without GetBody cannot be re-sent: one attempt.
	req, _ := http.NewRequest("POST", a.srv.URL, io.NopCloser(bytes.NewReader([]byte("once"))))
	req.GetBody = nil
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 502 || a.attempts.Load() != 1 {
		t.Fatalf("no GetBody: %v %v attempts %d", err, resp, a.attempts.Load())
	}
	resp.Body.Close()
	// With GetBody the body is re-sent intact.
	_, body, err := post(t, c, a.srv.URL, "again")
	if err != nil || body != "execution 1 of again" {
		t.Fatalf("re-sent body: %v %q", err, body)
	}
	// GET: no key, no retry.
	g := newAPI(t, func(int64) int { return 503 })
	resp, err = c.Get(g.srv.URL)
	if err != nil || resp.StatusCode != 503 || g.attempts.Load() != 1 || g.keys[0] != "" {
		t.Fatalf("GET: %v %v attempts %d keys %v", err, resp, g.attempts.Load(), g.keys)
	}
	resp.Body.Close()
}

func ExampleNew() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store)
	charges := 0
	srv := httptest.NewServer(idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		if charges == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // a transient failure: not stored
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()

	c := &http.Client{Transport: client.New(http.DefaultTransport, client.WithBackoff(time.Millisecond, 10*time.Millisecond))}
	resp, err := c.Post(srv.URL, "application/json", strings.NewReader(`{"amount":100}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", charges, "attempts")
	// Output: 201 after 2 attempts
}

// An outcome-unknown answer is not retried with the same key; the error says why.
func TestOutcomeUnknownIsNotRetried(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte(`{"type":"urn:idemproxy:problem:outcome-unknown","status":502}`))
	}))
	defer srv.Close()
	c := &http.Client{Transport: client.New(nil)}
	_, err := c.Post(srv.URL, "application/json", strings.NewReader("{}"))
	var unknown *client.OutcomeUnknownError
	if !errors.As(err, &unknown) || unknown.Status != 502 || !strings.Contains(err.Error(), "may have been executed") || calls.Load() != 1 {
		t.Fatalf("err = %v (calls %d); want one attempt and an OutcomeUnknownError", err, calls.Load())
	}
}

// The client understands the core's answers in every error format: an unknown
// outcome is not retried, a 409 in flight is retried after its Retry-After, a 422
// is final.
func TestEveryErrorFormat(t *testing.T) {
	for _, format := range []string{"problem", "stripe", `{"errors":[{"code":"{code}","message":"{detail}"}]}`} {
		t.Run(format, func(t *testing.T) {
			store, err := memstore.New(memstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			ef, err := errformat.Parse(format)
			if err != nil {
				t.Fatal(err)
			}
			h, err := middleware.New(store, func(s *middleware.Settings) { s.ErrorFormat = ef; s.RetryAfter = time.Second })
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = h.Handle(w, r, middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
					calls.Add(1)
					switch r.URL.Path {
					case "/reset":
						return middleware.MarkOutcomeUnknown(errors.New("connection reset"))
					case "/slow":
						<-release
					}
					w.WriteHeader(http.StatusCreated)
					return nil
				}))
			}))
			defer srv.Close()
			c := &http.Client{Transport: client.New(nil, fast(client.WithMaxElapsed(10*time.Second))...)}

			_, err = c.Post(srv.URL+"/reset", "application/json", strings.NewReader("{}"))
			var unknown *client.OutcomeUnknownError
			if !errors.As(err, &unknown) || calls.Load() != 1 {
				t.Fatalf("unknown outcome: err %v, calls %d; want one attempt and an OutcomeUnknownError", err, calls.Load())
			}

			// In flight: the duplicate's 409 is retried after Retry-After, then replayed.
			go func() {
				req, _ := http.NewRequest("POST", srv.URL+"/slow", strings.NewReader("x"))
				req.Header.Set("Idempotency-Key", "k-slow")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			testutil.Eventually(t, 5*time.Second, "the first request to run", func() bool { return calls.Load() == 2 })
			time.AfterFunc(300*time.Millisecond, func() { close(release) })
			resp, _, err := post(t, c, srv.URL+"/slow", "x", "Idempotency-Key", "k-slow")
			if err != nil || resp.StatusCode != 201 || resp.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("in flight, then replayed: %v %v", resp, err)
			}

			// Key reuse: 422, final, sent once.
			before := calls.Load()
			resp, body, err := post(t, c, srv.URL+"/slow", "y", "Idempotency-Key", "k-slow")
			if err != nil || resp.StatusCode != 422 || resp.Header.Get("Idempotency-Problem") != middleware.ProblemMismatch ||
				resp.Header.Get("Idempotency-Key") != "k-slow" || resp.Header.Get("Cache-Control") != "no-store" || calls.Load() != before {
				t.Fatalf("422: %v %q %v", resp, body, err)
			}
		})
	}
}
