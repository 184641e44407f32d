// Package faultproxy is a TCP proxy on loopback for tests, placed between a client
// and a server (idemproxy and Redis) to inject network faults on command: a reply
// lost with its connection, latency, and a half-open connection.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from Addr() to its target.
type Proxy struct {
	ln     net.Listener
	target string

	dropReplies atomic.Int64 // replies still to drop
	latency     atomic.Int64 // nanoseconds added before each forwarded reply
	blackhole   atomic.Bool  // forward nothing, close nothing
	dropped     atomic.Int64
	closed      atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// New listens on a free loopback port and forwards to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropReplies makes the next n replies from the server vanish: each one's bytes
// are discarded and its connection closed, after the server executed the request.
func (p *Proxy) DropReplies(n int) { p.dropReplies.Store(int64(n)) }

// Dropped is how many replies were dropped so far.
func (p *Proxy) Dropped() int { return int(p.dropped.Load()) }

// SetLatency delays every reply by d.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Blackhole stops (or resumes) forwarding in both directions without closing
// anything: a half-open connection, as after a network partition.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// ResetAll closes every open connection (a reset seen by both sides).
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	p.closed.Store(true) // ends a blackhole's wait
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		p.wg.Add(2)
		go p.pipe(server, client, false)
		go p.pipe(client, server, true)
	}
}

// pipe copies src to dst; replies (server to client) are where faults apply.
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.track(dst, false)
		p.track(src, false)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for p.blackhole.Load() && !p.closed.Load() {
				time.Sleep(5 * time.Millisecond)
			}
			if reply {
				if d := p.latency.Load(); d > 0 {
					time.Sleep(time.Duration(d))
				}
				if p.dropReplies.Load() > 0 && p.dropReplies.Add(-1) >= 0 {
					p.dropped.Add(1)
					return // the reply is lost with its connection
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}
