package main

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// SIGTERM while a request is in flight: the service stops accepting, lets the
// request finish (its response reaches the client, and is stored), waits for the
// middleware's background store writes, and exits 0.
func TestGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example")
	}
	bin := testutil.Build(t, "../service")
	addr := testutil.FreeAddr(t)
	p := testutil.Start(t, bin, []string{"--listen", addr})
	p.WaitHTTP(t, "http://"+addr+"/")

	// A request whose body is still coming when the signal arrives.
	conn := testutil.RawConn(t, addr, "POST /orders HTTP/1.1\r\nHost: svc\r\nIdempotency-Key: o-1\r\n"+
		"Content-Length: 10\r\nConnection: close\r\n\r\n{\"sku\":")
	time.Sleep(200 * time.Millisecond) // the server has read the headers: the connection is active
	p.Signal(t, syscall.SIGTERM)
	testutil.Eventually(t, 5*time.Second, "the service to log that it drains", func() bool {
		return strings.Contains(p.Logs.String(), "shutting down")
	})
	if _, err := io.WriteString(conn, `"x"}`); err != nil {
		t.Fatalf("the in-flight request's connection was closed at the signal: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the in-flight request got no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(body), `"order":1`) {
		t.Fatalf("in-flight request: %d %s", resp.StatusCode, body)
	}
	if err := p.Exit(t, 10*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Logs)
	}
	if logs := p.Logs.String(); !strings.Contains(logs, "stopped") {
		t.Fatalf("no stopped line:\n%s", logs)
	}
}
