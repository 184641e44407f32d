package middleware_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// exchange sends one raw HTTP/1.1 request on a new connection and returns the
// answer's status and Idempotency-Problem, and whether it was a replay.
func exchange(t *testing.T, addr, request string) (int, string, bool) {
	t.Helper()
	a := testutil.RawExchange(t, addr, request)
	return a.Status, a.Header.Get(middleware.ProblemHeader), a.Replayed
}

// A first execution that switches protocols or takes the connection over left
// no answer to store, and the handler may have acted: the key is held as an
// unknown outcome, never released, so its retry does not run again. The
// request itself asked for no upgrade (that is refused before next runs).
func TestSwitchedOrHijackedFirstExecutionIsHeld(t *testing.T) {
	for _, c := range []struct {
		name string
		next func(w http.ResponseWriter, r *http.Request)
	}{
		{"101 written", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "x-custom")
			w.WriteHeader(http.StatusSwitchingProtocols)
		}},
		{"hijacked", func(w http.ResponseWriter, r *http.Request) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x-custom\r\n\r\n")
			_ = brw.Flush()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			h := newHandler(t, newMem(t))
			srv := httptest.NewServer(h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				_, _ = io.ReadAll(r.Body)
				c.next(w, r)
			})))
			defer srv.Close()
			addr := strings.TrimPrefix(srv.URL, "http://")
			req := "POST /charges HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: sw1\r\nContent-Length: 1\r\n\r\nx"
			if status, _, _ := exchange(t, addr, req); status != 101 {
				t.Fatalf("first: %d, want the handler's 101", status)
			}
			var status int
			var problem string
			var replayed bool
			testutil.Eventually(t, 5*time.Second, "the first execution to settle", func() bool {
				status, problem, replayed = exchange(t, addr, req)
				return status != http.StatusConflict
			})
			if n := calls.Load(); n != 1 || status != http.StatusBadGateway || problem != middleware.ProblemOutcomeUnknown || !replayed {
				t.Fatalf("retry: %d %q replayed=%v, handler ran %d times; want the held 502 outcome-unknown, replayed, and one run",
					status, problem, replayed, n)
			}
		})
	}
}

// A tracked request that carries a key and asks to switch protocols (an Upgrade
// header, or Connection naming upgrade) is answered 400 upgrade-refused in the
// route's error format, before anything is claimed or next runs; the same
// request without the upgrade then runs. Without a key it passes through.
func TestUpgradeWithAKeyIsRefused(t *testing.T) {
	for _, c := range []struct {
		format, source, key, body, want string
	}{
		{"problem", "", "u1", "x", `"type":"urn:idemproxy:problem:upgrade-refused"`},
		{"stripe", "", "u1", "x", `"code":"upgrade_refused"`},
		{`{"error":"{code}","why":"{detail}"}`, "", "u1", "x", `"error":"upgrade_refused"`},
		{"problem", "json:/k", "", `{"k":"u1"}`, `"status":400`},
	} {
		for _, up := range []http.Header{
			{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}},
			{"Upgrade": {"h2c"}},
			{"Connection": {"keep-alive, upgrade"}},
		} {
			cnt := &counter{}
			h := newHandler(t, newMem(t), errorFormatOpt(c.format), keySourceOpt(c.source))
			w := serve(h.Wrap(cnt), req{Key: c.key, Body: c.body, Header: up})
			if w.Code != 400 || w.Header().Get(middleware.ProblemHeader) != middleware.ProblemUpgradeRefused ||
				!strings.Contains(w.Body.String(), c.want) || cnt.Calls.Load() != 0 {
				t.Fatalf("%s %v: %d %v %s (ran %d)", c.format, up, w.Code, w.Header(), w.Body, cnt.Calls.Load())
			}
			if c.key != "" && w.Header().Get("Idempotency-Key") != c.key {
				t.Fatalf("%s: the key is not echoed: %v", c.format, w.Header())
			}
			if w := serve(h.Wrap(cnt), req{Key: c.key, Body: c.body}); w.Code != 201 || cnt.Calls.Load() != 1 {
				t.Fatalf("%s: the same request without the upgrade: %d (ran %d); nothing may have been claimed", c.format, w.Code, cnt.Calls.Load())
			}
		}
	}
	cnt := &counter{}
	h := newHandler(t, newMem(t))
	if w := serve(h.Wrap(cnt), req{Body: "x", Header: http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}}); w.Code != 201 || cnt.Calls.Load() != 1 {
		t.Fatalf("an upgrade without a key: %d (ran %d), want it passed through", w.Code, cnt.Calls.Load())
	}
}

// Inside next, Running says how the core passed the request on: a first
// execution, or a pass-through and why.
func TestRunning(t *testing.T) {
	type seen struct {
		first bool
		pass  middleware.Outcome
	}
	var got []seen
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first, pass := middleware.Running(r)
		got = append(got, seen{first, pass})
		w.WriteHeader(201)
	})
	h := newHandler(t, newMem(t)).Wrap(next)
	serve(h, req{Key: "run"})
	serve(h, req{Key: "run"}) // replayed: next is not called
	serve(h, req{})           // no key: passed through
	if want := []seen{{true, ""}, {false, middleware.OutcomeBypass}}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Running inside next: %+v, want %+v", got, want)
	}
	if first, pass := middleware.Running(&http.Request{}); first || pass != "" {
		t.Fatalf("a request that did not come through the core: %v %q", first, pass)
	}
}
