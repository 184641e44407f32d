package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// Over HTTP/2, a stalled body is answered at body_read_timeout and its stream
// ends (the client's body is closed), while the connection, shared by other
// streams, stays open: "Connection: close" is an HTTP/1 answer (net/http's
// HTTP/2 server would turn it into a GOAWAY for every stream).
func TestStalledBodyOverHTTP2EndsTheStreamOnly(t *testing.T) {
	c := &counter{}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.BodyReadTimeout = 500 * time.Millisecond })
	srv := httptest.NewUnstartedServer(h.Wrap(c))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()

	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("0123456789")) }()
	req, _ := http.NewRequest("POST", srv.URL+"/charge", pr)
	req.ContentLength = 100000
	req.Header.Set("Idempotency-Key", "h2-stall")
	began := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 400 || !strings.Contains(string(body), "body-unreadable") || resp.Header.Get("Connection") != "" {
		t.Fatalf("HTTP/%d %d %v %s", resp.ProtoMajor, resp.StatusCode, resp.Header, body)
	}
	if took := time.Since(began); took < 400*time.Millisecond || took > 5*time.Second {
		t.Fatalf("answered after %v, want about body_read_timeout", took)
	}
	// The stream is over: the transport closed the request body.
	werr := make(chan error, 1)
	go func() {
		for {
			if _, err := pw.Write([]byte("x")); err != nil {
				werr <- err
				return
			}
		}
	}()
	select {
	case err := <-werr:
		if !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("writing the rest of the body: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream still takes body bytes 5s after the answer")
	}
	// The connection is not: the next request reuses it.
	reused := false
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, _ = http.NewRequestWithContext(ctx, "POST", srv.URL+"/charge", strings.NewReader("ok"))
	req.Header.Set("Idempotency-Key", "h2-next")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || !reused {
		t.Fatalf("next request: %d, reused connection %v", resp.StatusCode, reused)
	}
	if n := c.Calls.Load(); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
}

// stallingBody yields its first bytes, then blocks until released.
type stallingBody struct {
	first   []byte
	release chan struct{}
	reading chan struct{}
	once    sync.Once
}

func newStallingBody(first string) *stallingBody {
	return &stallingBody{first: []byte(first), release: make(chan struct{}), reading: make(chan struct{})}
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	b.once.Do(func() { close(b.reading) })
	<-b.release
	return 0, errors.New("client went away")
}

func (b *stallingBody) Close() error { return nil }

// Handlers built with the same body_budget share one pool, whatever else
// differs (two routes of the proxy, a Caddy config and its reload); a body
// reserves its declared length before it is read, an unknown length as it
// arrives; past the budget: 503 overloaded with Retry-After, nothing claimed or
// forwarded; what a request held is back when it returns.
func TestBodyBudgetSharedAndReturned(t *testing.T) {
	const budget = 3 << 20 // a size no other test uses: its own pool
	store := newMem(t)
	var ev events
	c := &counter{}
	a := newHandler(t, store, func(s *middleware.Settings) { s.BodyBudget = budget }, func(s *middleware.Settings) { s.MaxRequestBody = 2 << 20 }, func(s *middleware.Settings) { s.Observer = ev.Observe }).Wrap(c)
	b := newHandler(t, store, func(s *middleware.Settings) { s.BodyBudget = budget }, func(s *middleware.Settings) { s.MaxRequestBody = 1 << 20 }, keySourceOpt("json:/id"),
		func(s *middleware.Settings) { s.RetryAfter = 2 * time.Second }, func(s *middleware.Settings) { s.Observer = ev.Observe }).Wrap(c)

	// A holds 2 MiB (declared) while it stalls.
	stall := newStallingBody("{")
	held := httptest.NewRequest("POST", "/charge", nil)
	held.Body, held.ContentLength = stall, 2<<20
	held.Header.Set("Idempotency-Key", "holder")
	done := make(chan int)
	go func() {
		w := httptest.NewRecorder()
		a.ServeHTTP(w, held)
		done <- w.Code
	}()
	<-stall.reading

	// B, another handler, has the 1 MiB left: half of it fits; with another
	// request holding all but 100 KiB, a declared megabyte is refused before it
	// is read, and one of unknown length once it outgrows the 100 KiB.
	fits := `{"id":"fits","pad":"` + strings.Repeat("p", 1<<19) + `"}`
	if r := testutil.ResultOf(serve(b, req{Body: fits})); r.Status != 201 {
		t.Fatalf("a body that fits beside the holder: %+v", r)
	}
	for _, chunked := range []bool{false, true} {
		big := strings.NewReader(`{"id":"big","pad":"` + strings.Repeat("p", 1<<20-30) + `"}`)
		r := httptest.NewRequest("POST", "/charge", nil)
		r.Body, r.ContentLength = io.NopCloser(big), int64(big.Len())
		if chunked {
			r.ContentLength = -1
		}
		blocker := newStallingBody("")
		// Another request holds the last megabyte while this one is read.
		third := httptest.NewRequest("POST", "/charge", nil)
		third.Body, third.ContentLength = blocker, 1<<20-100<<10
		third.Header.Set("Idempotency-Key", fmt.Sprint("third-", chunked))
		thirdDone := make(chan struct{})
		go func() { a.ServeHTTP(httptest.NewRecorder(), third); close(thirdDone) }()
		<-blocker.reading
		w := httptest.NewRecorder()
		b.ServeHTTP(w, r)
		if w.Code != 503 || w.Header().Get("Retry-After") != "2" || w.Header().Get(middleware.ProblemHeader) != middleware.ProblemOverloaded ||
			!strings.Contains(w.Body.String(), "Request body budget exhausted") {
			t.Fatalf("chunked=%v past the budget: %d %v %s", chunked, w.Code, w.Header(), w.Body)
		}
		close(blocker.release)
		<-thirdDone
	}
	close(stall.release)
	if code := <-done; code != 400 {
		t.Fatalf("the holder, its client gone: %d", code)
	}
	// Everything is back: with 1 MiB held through B, 2 MiB fit through A.
	stall = newStallingBody("")
	held = httptest.NewRequest("POST", "/charge", nil)
	held.Body, held.ContentLength = stall, 1<<20
	go func() {
		w := httptest.NewRecorder()
		b.ServeHTTP(w, held)
		done <- w.Code
	}()
	<-stall.reading
	if r := testutil.ResultOf(serve(a, req{Key: "whole", Body: strings.Repeat("w", 2<<20)})); r.Status != 201 {
		t.Fatalf("after the holders left: %+v", r)
	}
	close(stall.release)
	<-done
	if n := c.Calls.Load(); n != 2 {
		t.Fatalf("executions %d, want 2 (nothing refused ran)", n)
	}
	overloaded := 0
	for _, o := range ev.Outcomes() {
		if o == middleware.OutcomeOverloaded {
			overloaded++
		}
	}
	if overloaded != 2 {
		t.Fatalf("outcomes %v: want 2 overloaded", ev.Outcomes())
	}
}

func TestBodyBudgetSettings(t *testing.T) {
	for _, tc := range []struct {
		edit func(*middleware.Settings)
		want string
	}{
		{func(s *middleware.Settings) { s.BodyBudget = 0 }, "at least max_request_body"},
		{func(s *middleware.Settings) { s.BodyBudget = 1 << 20 }, "at least max_request_body"},
		{func(s *middleware.Settings) { s.BodyBudget, s.MaxRequestBody = 1<<20, 1<<20 }, ""},
		{func(s *middleware.Settings) {}, ""},
	} {
		s := middleware.DefaultSettings()
		tc.edit(&s)
		err := s.Check()
		var se *cache.FieldError
		if tc.want == "" && err != nil || tc.want != "" && (!errors.As(err, &se) || se.Field != "body_budget" || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("body_budget %d, max_request_body %d: %v, want %q", s.BodyBudget, s.MaxRequestBody, err, tc.want)
		}
	}
	if d := middleware.DefaultSettings(); d.BodyBudget != 256<<20 {
		t.Fatalf("default body_budget %d", d.BodyBudget)
	}
}

// The overloaded answer is retryable in every error format: Stripe's SDKs are
// told to retry it, and it carries Retry-After.
func TestOverloadedInStripeFormat(t *testing.T) {
	const budget = 3<<20 + 1 // its own pool
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.BodyBudget = budget }, func(s *middleware.Settings) { s.MaxRequestBody = budget },
		errorFormatOpt(errformat.StripeSpec)).Wrap(&counter{})
	stall := newStallingBody("")
	held := httptest.NewRequest("POST", "/charge", nil)
	held.Body, held.ContentLength = stall, budget
	held.Header.Set("Idempotency-Key", "holder")
	done := make(chan struct{})
	go func() { h.ServeHTTP(httptest.NewRecorder(), held); close(done) }()
	<-stall.reading
	w := serve(h, req{Key: "k", Body: "x"})
	close(stall.release)
	<-done
	if w.Code != 503 || w.Header().Get("Stripe-Should-Retry") != "true" || w.Header().Get("Retry-After") != "1" ||
		w.Header().Get("Idempotency-Key") != "k" || !strings.Contains(w.Body.String(), `"code":"overloaded"`) {
		t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body)
	}
}

// The body read for the fingerprint can be read again by a hook that reads
// r.Body (a ScopeFunc here), and the next handler still gets it whole, even
// after a hook took it, with GetBody rewinding it, in the form net/http's
// transport sends in one write (io.NopCloser around a *bytes.Reader).
func TestReadBodyIsReadAgainByHooksAndForwardedWhole(t *testing.T) {
	const body = `{"amount":100}`
	var scoped []string
	h := newHandler(t, newMem(t), func(s *middleware.Settings) {
		s.ScopeFunc = func(r *http.Request) string {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("a hook reading r.Body: %v", err)
			}
			scoped = append(scoped, string(b))
			return "tenant"
		}
	})
	var got, again, kind string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		kind = fmt.Sprintf("%T", r.Body)
		if r.GetBody == nil {
			t.Error("no GetBody on the forwarded request")
		} else if rc, err := r.GetBody(); err == nil {
			b, _ := io.ReadAll(rc)
			again = string(b)
		}
		w.WriteHeader(http.StatusCreated)
	})
	for i := range 2 { // the first executes, the second is a replay
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", "k-body")
		h.Wrap(next).ServeHTTP(w, r)
		if w.Code != http.StatusCreated || (i == 1) != (w.Header().Get("Idempotent-Replayed") == "true") {
			t.Fatalf("request %d: %d, replayed %q", i, w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	}
	if got != body || again != body {
		t.Fatalf("the next handler read %q, and %q from GetBody; want %q", got, again, body)
	}
	if kind != "io.nopCloserWriterTo" && kind != "io.nopCloser" {
		t.Fatalf("the forwarded body is a %s; want io.NopCloser's (around a *bytes.Reader)", kind)
	}
	if len(scoped) == 0 || scoped[0] != body {
		t.Fatalf("the hook read %q; want %q first", scoped, body)
	}
}
