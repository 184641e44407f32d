package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// rawUpstream accepts connections and, for each request it reads whole, counts
// it and does what act says: "reset" closes with RST, "cut" sends headers and
// half the body then closes, "ok" answers 201.
type rawUpstream struct {
	ln    net.Listener
	act   atomic.Value // string
	count atomic.Int64
}

func newRawUpstream(t *testing.T, act string) *rawUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	u.act.Store(act)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		n := u.count.Add(1)
		switch u.act.Load().(string) {
		case "reset":
			c.(*net.TCPConn).SetLinger(0) // RST: the request was read, no answer
			return
		case "cut":
			fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n0123456789")
			return
		default:
			body := fmt.Sprintf("charged #%d", n)
			fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	}
}

// Upstream resets after reading the request: held. The answer and every retry
// are the outcome-unknown problem, the retry is not forwarded, and `keys release`
// lets the next retry run, once.
func TestE2EUnknownOutcomeResetIsHeld(t *testing.T) {
	skipShort(t)
	up := newRawUpstream(t, "reset")
	p := start(t, "--upstream", "http://"+up.ln.Addr().String())
	for i := range 3 {
		r := send(t, p.addr, "/charges", "u1", "x")
		if r.status != 502 || !strings.Contains(r.body, "outcome-unknown") || r.replayed != (i > 0) {
			t.Fatalf("answer %d: %d %s replayed=%v", i, r.status, r.body, r.replayed)
		}
	}
	if n := up.count.Load(); n != 1 {
		t.Fatalf("upstream got the request %d times, want once", n)
	}
	code, out := runBin(t, "keys", "get", "u1", "--admin", p.admin, "--host", "api.example")
	if code != 0 || !strings.Contains(out, `"unknown_outcome": true`) {
		t.Fatalf("keys get: %d %s", code, out)
	}
	up.act.Store("ok")
	if code, out := runBin(t, "keys", "release", "u1", "--admin", p.admin, "--host", "api.example"); code != 0 || !strings.Contains(out, `"released": true`) {
		t.Fatalf("keys release: %d %s", code, out)
	}
	if r := send(t, p.addr, "/charges", "u1", "x"); r.status != 201 || r.replayed {
		t.Fatalf("after release: %+v", r)
	}
	if r := send(t, p.addr, "/charges", "u1", "x"); !r.replayed || up.count.Load() != 2 {
		t.Fatalf("after the released retry ran: %+v, upstream %d", r, up.count.Load())
	}
	if code, _ := runBin(t, "keys", "release", "u1", "--admin", p.admin, "--host", "api.example"); code != 1 {
		t.Fatalf("release of a completed key: exit %d, want 1", code)
	}
}

// Upstream not listening: the request never left, the key is released, and the
// retry runs once the upstream is up.
func TestE2ENotSentIsReleased(t *testing.T) {
	skipShort(t)
	addr := testutil.FreeAddr(t)
	p := start(t, "--upstream", "http://"+addr)
	if r := send(t, p.addr, "/charges", "n1", "x"); r.status != 502 || !strings.Contains(r.body, "upstream-unavailable") {
		t.Fatalf("upstream down: %d %s", r.status, r.body)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	up := &rawUpstream{ln: ln}
	up.act.Store("ok")
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go up.serve(c)
		}
	}()
	if r := send(t, p.addr, "/charges", "n1", "x"); r.status != 201 || r.replayed || up.count.Load() != 1 {
		t.Fatalf("retry once the upstream is up: %+v (upstream %d)", r, up.count.Load())
	}
}

// A timeout after the request was sent (handler_timeout) is held, as 504; a
// body cut halfway is held, as 502.
func TestE2EUnknownOutcomeTimeoutAndCutBody(t *testing.T) {
	skipShort(t)
	slow := newUpstream(t)
	p := start(t, "--upstream", slow.URL, "--handler-timeout", "500ms")
	for i := range 2 {
		r := send(t, p.addr, "/slow?ms=3000", "t1", "")
		if r.status != 504 || !strings.Contains(r.body, "outcome-unknown") || r.replayed != (i > 0) {
			t.Fatalf("timeout answer %d: %d %s", i, r.status, r.body)
		}
	}
	if n := slow.count("t1"); n != 1 {
		t.Fatalf("timed-out request forwarded %d times", n)
	}

	cut := newRawUpstream(t, "cut")
	q := start(t, "--upstream", "http://"+cut.ln.Addr().String())
	if _, err := sendErr(t.Context(), q.addr, "/charges", "c1", "x"); err == nil {
		// The client may or may not see the cut, depending on timing; what
		// matters is the retry below.
		_ = err
	}
	testutil.Eventually(t, 5*time.Second, "the cut response to be settled", func() bool {
		r, err := sendErr(t.Context(), q.addr, "/charges", "c1", "x")
		return err == nil && r.status == 502 && r.replayed && strings.Contains(r.body, "outcome-unknown")
	})
	if n := cut.count.Load(); n != 1 {
		t.Fatalf("cut response: upstream got %d requests, want 1", n)
	}
}
