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
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--ttl", "1s")

	first := send(t, p.addr, "/pay", "k1", "a")
	again := send(t, p.addr, "/pay", "k1", "a")
	if first.status != 201 || first.replayed || !again.replayed || again.body != first.body || again.header.Get("X-Execution") != "1" {
		t.Fatalf("replay: first %+v again %+v", first, again)
	}
	if r := send(t, p.addr, "/pay", "k1", "b"); r.status != 422 || !strings.Contains(r.body, "mismatch") {
		t.Fatalf("mismatch: %+v", r)
	}
	if r := send(t, p.addr, "/pay", "a,b", "a"); r.status != 400 || !strings.Contains(r.body, "invalid-key") {
		t.Fatalf("invalid key: %+v", r)
	}
	// 5xx is not stored: the retry runs again.
	send(t, p.addr, "/fail", "k5", "")
	if r := send(t, p.addr, "/fail", "k5", ""); r.status != 500 || up.count("k5") != 2 {
		t.Fatalf("5xx: %+v, executions %d", r, up.count("k5"))
	}
	// 409 while in flight.
	done := make(chan result)
	go func() { done <- send(t, p.addr, "/block", "k409", "") }()
	<-up.started
	if r := send(t, p.addr, "/block", "k409", ""); r.status != 409 || r.header.Get("Retry-After") == "" {
		t.Fatalf("in flight: %+v", r)
	}
	up.release <- struct{}{}
	if r := <-done; r.status != 201 {
		t.Fatalf("blocked first: %+v", r)
	}
	// TTL expiry: after --ttl the key runs again.
	deadline := time.Now().Add(5 * time.Second)
	for send(t, p.addr, "/pay", "k1", "a").replayed {
		if time.Now().After(deadline) {
			t.Fatal("record did not expire after its 1s TTL")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if up.count("k1") != 2 {
		t.Fatalf("k1 executions = %d, want 2 (once, then once after expiry)", up.count("k1"))
	}
	// Untracked methods pass through.
	resp, err := http.Get("http://" + p.addr + "/pay")
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("GET through the proxy: %v %v", resp, err)
	}
	resp.Body.Close()
	// One JSON log line per tracked request, with outcome and key hash, never the key.
	logs := p.stderr.String()
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
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL)
	for _, key := range []string{"e1", "e1"} { // a first execution, then its replay
		conn, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
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
	if n := up.count("e1"); n != 1 {
		t.Fatalf("upstream ran e1 %d times", n)
	}
}

func TestE2ERequireKeyAndClientHangUp(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--require-key")
	if r := send(t, p.addr, "/pay", "", "x"); r.status != 400 || !strings.Contains(r.body, "missing-key") {
		t.Fatalf("missing key: %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := sendErr(ctx, p.addr, "/slow?ms=300", "hang", "x"); errc <- err }()
	<-up.started
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("client request was not cancelled")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := send(t, p.addr, "/slow?ms=300", "hang", "x")
		if r.status == 201 {
			if !r.replayed || up.count("hang") != 1 {
				t.Fatalf("retry after hang-up: %+v, executions %d", r, up.count("hang"))
			}
			break
		}
		if r.status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry after hang-up: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestE2EUpstreamDown(t *testing.T) {
	skipShort(t)
	p := start(t, "--upstream", "http://"+testutil.FreeAddr(t))
	for i := 0; i < 2; i++ { // released each time: a retry is a new attempt, not a 409
		if r := send(t, p.addr, "/pay", "down", "x"); r.status != 502 || !strings.Contains(r.body, "upstream-unavailable") {
			t.Fatalf("attempt %d with the upstream down: %+v", i, r)
		}
	}
}
