package testutil

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// RawUpstream is an HTTP/1.1 upstream on a raw listener that can fail the ways a
// real one does after it read a request: for each request read whole it counts
// it and does what Act says: "reset" closes with RST (no answer), "cut" sends the
// headers and 10 of 100 declared body bytes then closes, "reset-reused" resets
// the second request on a keep-alive connection (after reading it) and answers
// the others, "upgrade" answers 101 Switching Protocols to the protocol the
// request named in Upgrade and closes, anything else answers 201.
type RawUpstream struct {
	ln    net.Listener
	Act   atomic.Value // string
	Count atomic.Int64
}

// NewRawUpstream starts one on a free loopback port.
func NewRawUpstream(t testing.TB, act string) *RawUpstream {
	return NewRawUpstreamAt(t, "127.0.0.1:0", act)
}

// NewRawUpstreamAt starts one on addr; the test is skipped if addr is taken.
func NewRawUpstreamAt(t testing.TB, addr, act string) *RawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("raw upstream: %v", err)
	}
	u := &RawUpstream{ln: ln}
	u.Act.Store(act)
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

// Addr is the upstream's host:port.
func (u *RawUpstream) Addr() string { return u.ln.Addr().String() }

func (u *RawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for onConn := 1; ; onConn++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if req.Method != http.MethodPost {
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") // health polls
			continue
		}
		n := u.Count.Add(1)
		act := u.Act.Load().(string)
		if act == "reset-reused" && onConn == 2 {
			act = "reset"
		}
		switch act {
		case "reset":
			c.(*net.TCPConn).SetLinger(0) // RST: the request was read, no answer
			return
		case "cut":
			fmt.Fprint(c, "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n0123456789")
			return
		case "upgrade": // it acted, then switched: the rest is not HTTP
			fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\nswitched #%d", req.Header.Get("Upgrade"), n)
			return
		default:
			body := fmt.Sprintf("charged #%d", n)
			fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	}
}
