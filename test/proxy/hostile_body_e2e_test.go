package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// A client that declares a body and stalls is answered at body_read_timeout and
// its connection is closed then, whatever the framing. Before, the 400 was
// written and net/http then drained the rest of a body below 256 KiB with no
// deadline: the connection and its goroutine stayed until the client sent it.
func TestE2EStalledBodyAnsweredAndClosed(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	const timeout = time.Second
	p := start(t, "--upstream", up.URL, "--body-read-timeout", timeout.String())
	for _, tc := range []struct{ name, head, first string }{
		{"content-length", "POST /pay HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: s1\r\nContent-Length: 100000", "0123456789"},
		{"chunked", "POST /pay HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: s2\r\nTransfer-Encoding: chunked", "a\r\n0123456789\r\n"},
		// Answered before the body is read (a bad key): the rest is not waited
		// for past body_read_timeout either.
		{"bad key", "POST /pay HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: a,b\r\nContent-Length: 100000", "0123456789"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			conn := testutil.RawConn(t, p.Addr, tc.head+"\r\n\r\n"+tc.first)
			resp, body, closed := testutil.AnswerThenClose(t, conn, began.Add(timeout+4*time.Second))
			want := "body-unreadable"
			if tc.name == "bad key" {
				want = "invalid-key"
			}
			if resp.StatusCode != 400 || !strings.Contains(body, want) {
				t.Fatalf("stalled body: %d %q, want 400 %s", resp.StatusCode, body, want)
			}
			if !resp.Close {
				t.Errorf("the answer does not say Connection: close")
			}
			if took := closed.Sub(began); took < timeout-100*time.Millisecond && tc.name != "bad key" {
				t.Fatalf("answered and closed after %v, before body_read_timeout (%v)", took, timeout)
			}
		})
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("the upstream got %d requests, want none", n)
	}
	// The proxy serves on: a key that was never claimed runs at once.
	if r := p.Post(t, "/pay", "s1", "x"); r.Status != 201 {
		t.Fatalf("after the cut-off bodies: %+v", r)
	}
}

// The bodies held in memory by keyed requests share one budget across the
// proxy's routes. Past it a request is answered 503 overloaded with Retry-After,
// nothing claimed or forwarded: at once when its declared length does not fit, or
// when a chunked body outgrows it mid-read (then Connection: close). When the
// holders are gone, the budget is back.
func TestE2EBodyBudget(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := startConfig(t, fmt.Sprintf(`upstream: %s
max_request_body: 1MiB
body_budget: 1536KiB
retry_after: 3s
routes:
  - path: /hold
    body_read_timeout: 1m
  - path: /cut
    body_read_timeout: 2s
`, up.URL))

	// A holds 1 MiB of the budget: it declared it, sent 10 bytes and stalls.
	hold := func() net.Conn {
		return testutil.RawConn(t, p.Addr, "POST /hold HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: hold\r\nContent-Length: 1048576\r\n\r\n0123456789")
	}
	holder := hold()

	// 600 KiB declared does not fit beside it: 503 before a byte is read (the
	// first tries may come before A's handler reserved its share).
	big := strings.Repeat("b", 600<<10)
	var over testutil.Response
	var fitted []string
	testutil.Eventually(t, 30*time.Second, "a 503 beside the holder", func() bool {
		// A 600 KiB request that reached the core before the holder leaves
		// no room for it: the holder is answered 503 at once. It holds
		// nothing then, so it comes again.
		holder.SetReadDeadline(time.Now().Add(time.Millisecond))
		if n, _ := holder.Read(make([]byte, 1)); n > 0 {
			holder.Close()
			holder = hold()
		}
		key := fmt.Sprint("c-", len(fitted))
		over = p.Post(t, "/pay", key, big)
		if over.Status != 503 {
			if over.Status != 201 {
				t.Fatalf("600 KiB beside the holder: %d %s", over.Status, over.Body)
			}
			fitted = append(fitted, key)
			return false
		}
		if up.Count(key) != 0 {
			t.Fatalf("the refused request %s reached the upstream", key)
		}
		return true
	})
	if over.Header.Get("Retry-After") != "3" || over.Header.Get("Idempotency-Problem") != "urn:idemproxy:problem:overloaded" ||
		!strings.HasPrefix(over.Header.Get("Content-Type"), "application/problem+json") || !strings.Contains(over.Body, `"status":503`) {
		t.Fatalf("overloaded answer: %+v", over)
	}
	// A small body still fits.
	if r := p.Post(t, "/pay", "small", "tiny"); r.Status != 201 {
		t.Fatalf("a small body beside the holder: %+v", r)
	}

	// D, chunked on another route, outgrows the rest mid-read: 503, and its
	// connection is closed (by its route's body_read_timeout at the latest).
	began := time.Now()
	d := testutil.RawConn(t, p.Addr, "POST /cut HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: chunked\r\nTransfer-Encoding: chunked\r\n\r\n")
	go func() {
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 60<<10, strings.Repeat("d", 60<<10))
		for range 10 {
			if _, err := io.WriteString(d, chunk); err != nil {
				return
			}
		}
	}()
	resp, body, _ := testutil.AnswerThenClose(t, d, began.Add(2*time.Second+4*time.Second))
	if resp.StatusCode != 503 || resp.Header.Get("Idempotency-Problem") != "urn:idemproxy:problem:overloaded" || !resp.Close {
		t.Fatalf("chunked body past the budget: %d close=%v %s %s", resp.StatusCode, resp.Close, resp.Header, body)
	}
	if up.Count("chunked") != 0 {
		t.Fatal("the chunked request past the budget reached the upstream")
	}

	// A hangs up: its share comes back, and the 600 KiB body fits.
	holder.Close()
	testutil.Eventually(t, 10*time.Second, "the budget back after the holder left", func() bool {
		r := p.Post(t, "/pay", "after", big)
		return r.Status == 201
	})
	// Each overloaded answer seen above is counted on its route: the 600 KiB
	// request's (the top level) and the chunked one's (/cut). The held and
	// retried requests may add more to either, or to /hold.
	m := metricsOf(t, p.Admin)
	for _, route := range []string{`\(top level\)`, `/cut`} {
		if !regexp.MustCompile(`idemproxy_requests_total\{outcome="overloaded",route="` + route + `"\} [1-9]`).MatchString(m) {
			t.Fatalf("metrics do not count the overloaded answer on route %s:\n%s", route, m)
		}
	}
}

// A client that declares a body and stalls holds its connection and its buffer
// only for body_read_timeout, then gets 400; before, it held them forever.
func TestE2ESlowBodyIsCutOff(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--body-read-timeout", "1s")
	conn := testutil.RawConn(t, p.Addr, "POST /pay HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: slow\r\nContent-Length: 1000000\r\n\r\n0123456789")
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body within 15s: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || up.Total() != 0 {
		t.Fatalf("stalled body: %d, upstream calls %d; want 400 and none", resp.StatusCode, up.Total())
	}
	// A key that was never claimed can be used at once.
	if r := p.Post(t, "/pay", "slow", "x"); r.Status != 201 {
		t.Fatalf("the key after a cut-off body: %+v", r)
	}
}
