package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

func TestE2EProtocol(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--ttl", "1s")

	first := p.Post(t, "/pay", "k1", "a")
	again := p.Post(t, "/pay", "k1", "a")
	if first.Status != 201 || first.Replayed || !again.Replayed || again.Body != first.Body || again.Header.Get("X-Execution") != "1" {
		t.Fatalf("replay: first %+v again %+v", first, again)
	}
	if r := p.Post(t, "/pay", "k1", "b"); r.Status != 422 || !strings.Contains(r.Body, "mismatch") {
		t.Fatalf("mismatch: %+v", r)
	}
	if r := p.Post(t, "/pay", "a,b", "a"); r.Status != 400 || !strings.Contains(r.Body, "invalid-key") {
		t.Fatalf("invalid key: %+v", r)
	}
	// 5xx is not stored: the retry runs again.
	p.Post(t, "/fail", "k5", "")
	if r := p.Post(t, "/fail", "k5", ""); r.Status != 500 || up.Count("k5") != 2 {
		t.Fatalf("5xx: %+v, executions %d", r, up.Count("k5"))
	}
	// 409 while in flight.
	done := make(chan testutil.Response)
	go func() { done <- p.Post(t, "/block", "k409", "") }()
	<-up.Started
	if r := p.Post(t, "/block", "k409", ""); r.Status != 409 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("in flight: %+v", r)
	}
	up.Release <- struct{}{}
	if r := <-done; r.Status != 201 {
		t.Fatalf("blocked first: %+v", r)
	}
	// TTL expiry: after --ttl the key runs again.
	deadline := time.Now().Add(5 * time.Second)
	for p.Post(t, "/pay", "k1", "a").Replayed {
		if time.Now().After(deadline) {
			t.Fatal("record did not expire after its 1s TTL")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if up.Count("k1") != 2 {
		t.Fatalf("k1 executions = %d, want 2 (once, then once after expiry)", up.Count("k1"))
	}
	// Untracked methods pass through.
	resp, err := http.Get("http://" + p.Addr + "/pay")
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("GET through the proxy: %v %v", resp, err)
	}
	resp.Body.Close()
	// One JSON log line per tracked request, with outcome and key hash, never the key.
	logs := p.Logs.String()
	for _, want := range []string{`"msg":"request"`, `"outcome":"stored"`, `"outcome":"replayed"`, `"outcome":"conflict"`, `"key_hash":"`} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log lacks %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, `"k409"`) {
		t.Fatalf("log contains a raw key:\n%s", logs)
	}
}

// A client that sends "Expect: 100-continue" gets exactly one 100 Continue: the
// proxy reads the body to fingerprint it, so the upstream must not be asked for a
// second one (ReverseProxy relays 1xx responses).
func TestE2EExpectContinueOnce(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL)
	for _, key := range []string{"e1", "e1"} { // a first execution, then its replay
		conn, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", key)
		br := bufio.NewReader(conn)
		line, err := br.ReadString('\n')
		if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
			t.Fatalf("before the body: %q, %v", line, err)
		}
		if blank, err := br.ReadString('\n'); err != nil || blank != "\r\n" {
			t.Fatalf("after 100 Continue: %q, %v", blank, err)
		}
		if _, err := conn.Write([]byte("abc")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != 201 || string(body) != "executed e1 #1 with abc" {
			t.Fatalf("after the body: %d %q (a second 100 Continue shows up here)", resp.StatusCode, body)
		}
	}
	if n := up.Count("e1"); n != 1 {
		t.Fatalf("upstream ran e1 %d times", n)
	}
}

func TestE2ERequireKeyAndClientHangUp(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--require-key")
	if r := p.Post(t, "/pay", "", "x"); r.Status != 400 || !strings.Contains(r.Body, "missing-key") {
		t.Fatalf("missing key: %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := testutil.Do(ctx, p.Addr, testutil.KeyedPost("/slow?ms=300", "hang", "x"))
		errc <- err
	}()
	<-up.Started
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("client request was not cancelled")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := p.Post(t, "/slow?ms=300", "hang", "x")
		if r.Status == 201 {
			if !r.Replayed || up.Count("hang") != 1 {
				t.Fatalf("retry after hang-up: %+v, executions %d", r, up.Count("hang"))
			}
			break
		}
		if r.Status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry after hang-up: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestE2EUpstreamDown(t *testing.T) {
	skipShort(t)
	p := start(t, "--upstream", "http://"+testutil.FreeAddr(t))
	for i := 0; i < 2; i++ { // released each time: a retry is a new attempt, not a 409
		if r := p.Post(t, "/pay", "down", "x"); r.Status != 502 || !strings.Contains(r.Body, "upstream-unavailable") {
			t.Fatalf("attempt %d with the upstream down: %+v", i, r)
		}
	}
}
