package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

func TestClientHangUpStillStores(t *testing.T) {
	store := newMem(t)
	started := make(chan struct{})
	release := make(chan struct{})
	ctxErr := make(chan error, 1)
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		ctxErr <- r.Context().Err()
		w.WriteHeader(201)
		_, _ = w.Write(bytes.Repeat([]byte("z"), 256<<10)) // more than socket buffers take
	}}
	var evs events
	srv := httptest.NewServer(newHandler(t, store, func(s *middleware.Settings) { s.Observer = evs.Observe }).Wrap(c))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/pay", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", "hangup")
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(r)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel() // the client hangs up while the first request runs
	if err := <-errc; err == nil {
		t.Fatal("client request should have been cancelled")
	}
	close(release)
	if err := <-ctxErr; err != nil {
		t.Fatalf("next's context was cancelled by the hang-up: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "the response to be stored", func() bool { return len(evs.Outcomes()) == 1 })
	if o := evs.Outcomes(); o[0] != middleware.OutcomeStored {
		t.Fatalf("outcome %v, want stored", o)
	}
	r2, _ := http.NewRequest("POST", srv.URL+"/pay", strings.NewReader("x"))
	r2.Header.Set("Idempotency-Key", "hangup")
	resp, err := srv.Client().Do(r2)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || len(body) != 256<<10 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d, %d bytes, replayed=%q", resp.StatusCode, len(body), resp.Header.Get("Idempotent-Replayed"))
	}
	if c.Calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1", c.Calls.Load())
	}
}

func TestErrorsAndPanicsRelease(t *testing.T) {
	store := newMem(t)
	h := newHandler(t, store)
	boom := errors.New("upstream unreachable")
	calls := 0
	failing := middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error { calls++; return boom })
	for i := 0; i < 2; i++ {
		if err := h.Handle(httptest.NewRecorder(), req{Key: "err"}.Build(), failing); !errors.Is(err, boom) {
			t.Fatalf("Handle returned %v, want next's error", err)
		}
	}
	if calls != 2 {
		t.Fatalf("error from next: calls = %d, want 2 (key released)", calls)
	}

	panicky := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { panic("kaboom") }}
	wrapped := h.Wrap(panicky)
	for i := 0; i < 2; i++ {
		func() {
			defer func() {
				if p := recover(); p != "kaboom" {
					t.Fatalf("panic not re-raised: %v", p)
				}
			}()
			serve(wrapped, req{Key: "panic"})
		}()
	}
	if panicky.Calls.Load() != 2 {
		t.Fatalf("panic: calls = %d, want 2 (key released)", panicky.Calls.Load())
	}
	// http.ErrAbortHandler after the answer started (a reverse proxy's upstream
	// body cut mid-stream) is an unknown outcome: the key is held, not released.
	abort := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200); panic(http.ErrAbortHandler) }}
	srv := httptest.NewServer(h.Wrap(abort))
	defer srv.Close()
	for i := 0; i < 2; i++ {
		r, _ := http.NewRequest("POST", srv.URL, nil)
		r.Header.Set("Idempotency-Key", "abort")
		if resp, err := srv.Client().Do(r); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	if abort.Calls.Load() != 1 {
		t.Fatalf("abort after writing: calls = %d, want 1 (held: the outcome is unknown)", abort.Calls.Load())
	}
}

// The first execution is detached from the client but bounded by its own
// timeout, which is an unknown outcome: the key is held with 504, whatever the
// handler did after it (returned without writing, which net/http would answer
// 200; wrote its own answer), and the handler never runs again. Under
// unknown_outcome release the key is released, and the client still gets 504.
func TestHandlerTimeoutBoundsExecution(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(w http.ResponseWriter)
	}{
		{"returns without writing", func(http.ResponseWriter) {}},
		{"writes 200 after it", func(w http.ResponseWriter) { w.WriteHeader(200); _, _ = w.Write([]byte("late")) }},
		{"writes its own 504", func(w http.ResponseWriter) { w.WriteHeader(504) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan error, 1)
			c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
					got <- r.Context().Err()
				case <-time.After(10 * time.Second):
					got <- nil
				}
				tc.write(w)
			}}
			h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.HandlerTimeout = 30 * time.Millisecond }).Wrap(c)
			first := serve(h, req{Key: "slow"})
			if err := <-got; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("next's context ended with %v, want the handler timeout", err)
			}
			if first.Header().Get("Content-Length") != "" && first.Code == 200 && first.Body.Len() == 0 {
				t.Fatalf("first: an empty 200")
			}
			for i := 0; i < 2; i++ {
				w := serve(h, req{Key: "slow"})
				checkProblem(t, w.Header(), w.Body.Bytes(), 504, middleware.ProblemOutcomeUnknown)
				if w.Header().Get("Idempotent-Replayed") != "true" || c.Calls.Load() != 1 {
					t.Fatalf("retry %d: replayed=%q calls=%d, want the held answer and one run", i, w.Header().Get("Idempotent-Replayed"), c.Calls.Load())
				}
			}
		})
	}
	c := &counter{Fn: func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) {
		s.HandlerTimeout, s.UnknownOutcome = 30*time.Millisecond, middleware.UnknownRelease
	}).Wrap(c)
	for i := 1; i <= 2; i++ {
		w := serve(h, req{Key: "slow"})
		checkProblem(t, w.Header(), w.Body.Bytes(), 504, middleware.ProblemOutcomeUnknown)
		if c.Calls.Load() != int64(i) {
			t.Fatalf("unknown_outcome release, request %d: calls=%d, want the key released", i, c.Calls.Load())
		}
	}
}
