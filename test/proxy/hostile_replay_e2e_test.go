package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// A client that asks for a large stored answer and never reads it made the
// proxy hold the whole body, for ever: a replay had no write deadline and was
// not counted in any budget. 100 such connections for one 10 MiB record (a
// 100-byte request each) took the binary from 69 MB to 1.6 GB of RSS, and it
// stayed. Now a replay holds its size of body_budget while it is written
// (past it: 503 overloaded, nothing runs), and a client that accepts none of
// it for body_read_timeout has its connection closed.
func TestE2EStalledReplayReader(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := startConfig(t, fmt.Sprintf(`upstream: %s
body_budget: 20MiB
body_read_timeout: 2s
retry_after: 3s
`, up.URL))
	const size = 8 << 20
	req := "POST /big?kib=8192 HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: big\r\nContent-Length: 2\r\n\r\n{}"
	if r := testutil.RawExchange(t, p.Addr, req); r.Status != 201 || len(r.Body) != size || r.Replayed {
		t.Fatalf("first execution: %d replayed=%v %d bytes", r.Status, r.Replayed, len(r.Body))
	}

	// The record is stored once the first execution's handler returned, a
	// moment after its client read the answer: until then a request gets 409.
	testutil.Eventually(t, 10*time.Second, "the answer stored", func() bool {
		return testutil.RawExchange(t, p.Addr, req).Replayed
	})

	// Two readers that stall: 16 MiB of the 20 MiB budget while their replays
	// are written (the kernel's buffers take at most a few MiB of each).
	// Each must be answered 201 (the previous replay's share may not be back
	// yet the moment its client read it): only the status line is read.
	began := time.Now()
	stalled := []io.Reader{}
	for len(stalled) < 2 {
		c := testutil.RawConn(t, p.Addr, req)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line := make([]byte, len("HTTP/1.1 201"))
		if _, err := io.ReadFull(c, line); err != nil {
			t.Fatalf("a stalled reader's status line: %v", err)
		}
		if string(line) != "HTTP/1.1 201" {
			c.Close()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(25 * time.Second)) // for the rest, below
		stalled = append(stalled, io.MultiReader(strings.NewReader(string(line)), c))
	}
	// A third replay does not fit beside them: 503, and nothing runs again.
	var third testutil.Response
	testutil.Eventually(t, 10*time.Second, "a 503 beside two stalled readers", func() bool {
		third = testutil.RawExchange(t, p.Addr, req)
		return third.Status == 503
	})
	if third.Header.Get("Idempotency-Problem") != "urn:idemproxy:problem:overloaded" || third.Header.Get("Retry-After") != "3" {
		t.Fatalf("a replay past the budget: %d %s %s", third.Status, third.Header, third.Body)
	}
	if n := up.Count("big"); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}

	// A stalled reader's connection is closed once it accepted nothing for
	// body_read_timeout: it gets part of the body, then the end.
	time.Sleep(time.Until(began.Add(5 * time.Second))) // stalled past the timeout
	for i, c := range stalled {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stalled reader %d: %v", i, err)
		}
		got, err := io.Copy(io.Discard, resp.Body)
		if err == nil || got >= size {
			t.Fatalf("stalled reader %d read %d of %d bytes, err %v: its connection was not cut", i, got, size, err)
		}
		if strings.Contains(fmt.Sprint(err), "timeout") {
			t.Fatalf("stalled reader %d: still open after 20s (%d bytes)", i, got)
		}
	}

	// Their share comes back: the replay is served in full again.
	testutil.Eventually(t, 10*time.Second, "the replay after the stalled readers were cut", func() bool {
		r := testutil.RawExchange(t, p.Addr, req)
		return r.Status == 201 && r.Replayed && len(r.Body) == size
	})
	if n := up.Count("big"); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
}

// The same on a first execution: a client that never read its answer held the
// recorded body, an upstream connection and the key's claim (renewed while the
// write blocked) for as long as it kept the connection open, and its own retry
// on a new connection got 409 all that time. Now it is cut off at
// body_read_timeout, the answer is stored in full, and the retry replays it.
func TestE2EStalledFirstExecutionReader(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := startConfig(t, fmt.Sprintf(`upstream: %s
body_read_timeout: 2s
`, up.URL))
	const size = 8 << 20
	req := "POST /big?kib=8192 HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: first\r\nContent-Length: 2\r\n\r\n{}"
	stalled := testutil.RawConn(t, p.Addr, req)
	testutil.Eventually(t, 10*time.Second, "the first execution upstream", func() bool { return up.Count("first") == 1 })

	// The retry is answered with the whole stored answer once the stalled
	// client was cut off.
	var retry testutil.Response
	testutil.Eventually(t, 15*time.Second, "the replay after the stalled reader was cut", func() bool {
		retry = testutil.RawExchange(t, p.Addr, req)
		return retry.Status != 409
	})
	if retry.Status != 201 || !retry.Replayed || len(retry.Body) != size {
		t.Fatalf("the retry: %d replayed=%v %d bytes", retry.Status, retry.Replayed, len(retry.Body))
	}
	_ = stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(stalled), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.Copy(io.Discard, resp.Body)
	if err == nil || got >= size || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the stalled reader read %d of %d bytes, err %v: its connection was not cut", got, size, err)
	}
	if n := up.Count("first"); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
}
