package testutil

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Request is one request over a real socket, with everything a client
// controls.
type Request struct {
	Method string // POST when empty; sent as written ("post" stays lower case)
	// Target is the request-target, sent byte for byte ("/a/../b",
	// "/ch%61rges", "/slow?ms=300"); "/" when empty.
	Target string
	Host   string            // the Host header; the address sent to when empty
	Key    string            // the Idempotency-Key, when not empty
	Header map[string]string // more headers
	Body   string
}

// Response is what a request got back.
type Response struct {
	Status   int
	Body     string
	Header   http.Header
	Replayed bool // Idempotent-Replayed: true
}

// LoadBalancedHost is the Host KeyedPost sends, whatever instance it reaches:
// as behind a load balancer (the Host is part of a key's scope).
const LoadBalancedHost = "api.example"

// KeyedPost is a POST of body to target with the Idempotency-Key key (none
// when empty), the Host LoadBalancedHost, and the header name, value pairs.
func KeyedPost(target, key, body string, header ...string) Request {
	return Request{Target: target, Key: key, Body: body, Host: LoadBalancedHost, Header: Headers(header...)}
}

// Headers makes name, value pairs a header map (nil for none).
func Headers(pairs ...string) map[string]string {
	if len(pairs) == 0 {
		return nil
	}
	h := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		h[pairs[i]] = pairs[i+1]
	}
	return h
}

// Delivery is a webhook delivery: a POST of body to target with headers, and
// a JSON Content-Type unless they set one.
func Delivery(target, body string, headers map[string]string) Request {
	h := map[string]string{"Content-Type": "application/json"}
	for k, v := range headers {
		h[http.CanonicalHeaderKey(k)] = v
	}
	return Request{Target: target, Body: body, Header: h}
}

// Send sends q to addr (host:port) and returns the answer; it fails the test
// if none comes within a minute.
func Send(t testing.TB, addr string, q Request) Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Do(ctx, addr, q)
	if err != nil {
		t.Fatalf("%s %s (Host %q): %v", q.method(), q.Target, q.Host, err)
	}
	return r
}

// Do sends q to addr (host:port) under ctx: for a request that may fail, or
// one sent from a goroutine that must not end the test.
func Do(ctx context.Context, addr string, q Request) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, q.method(), "http://"+addr+"/", strings.NewReader(q.Body))
	if err != nil {
		return Response{}, err
	}
	target := q.Target
	if target == "" {
		target = "/"
	}
	if strings.HasPrefix(target, "//") {
		// An Opaque of "//x" would be sent as an absolute URI with host x.
		path, query, _ := strings.Cut(target, "?")
		req.URL.Path, _ = url.PathUnescape(path)
		req.URL.RawPath, req.URL.RawQuery = path, query
	} else {
		req.URL.Opaque = target // sent byte for byte as the request-target
	}
	if q.Host != "" {
		req.Host = q.Host
	}
	if q.Key != "" {
		req.Header.Set("Idempotency-Key", q.Key)
	}
	for k, v := range q.Header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // a body cut short is what the client got
	return Response{resp.StatusCode, string(b), resp.Header, resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

func (q Request) method() string {
	if q.Method == "" {
		return http.MethodPost
	}
	return q.Method
}

// RawConn opens a connection to addr, writes text on it byte for byte, and
// closes it when the test ends.
func RawConn(t testing.TB, addr, text string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, text); err != nil {
		t.Fatal(err)
	}
	return c
}

// RawExchange writes request byte for byte on a new connection to addr and
// reads the answer, within 10 s; the body is what follows the headers until
// the answer ends (for a 101, the switched connection's bytes until it closes).
func RawExchange(t testing.TB, addr, request string) Response {
	t.Helper()
	c := RawConn(t, addr, request)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{resp.StatusCode, string(b), resp.Header, resp.Header.Get("Idempotent-Replayed") == "true"}
}

// AnswerThenClose reads one response from conn and then expects the server to
// close the connection, all before deadline. It returns the response (its body
// read) and when the close was seen.
func AnswerThenClose(t testing.TB, conn net.Conn, deadline time.Time) (*http.Response, string, time.Time) {
	t.Helper()
	_ = conn.SetReadDeadline(deadline)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer by the deadline: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	rest, err := io.ReadAll(br) // until the server closes
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("answered %d, but the connection was still open at the deadline (%d more bytes)", resp.StatusCode, len(rest))
	case err != nil && !strings.Contains(err.Error(), "connection reset"):
		t.Fatalf("after the answer: %v", err)
	}
	return resp, string(body), time.Now()
}
