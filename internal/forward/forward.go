// Package forward is the upstream side of a first execution, shared by the
// proxy and the Caddy module: the transport tuned for one upstream (also the
// benchmark's bare proxy's, so the two are compared on equal terms), and Attempt,
// which guards a tracked request against Go's transport re-sending it and
// classifies how a failed call ended (not sent, or outcome unknown) by whether
// the request was written.
package forward

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// NewTransport is tuned for one upstream: a keep-alive pool large enough for the
// load (Go's default keeps 2 idle connections per host, which throttles a proxy).
func NewTransport(responseHeaderTimeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy: nil, // never send upstream traffic through HTTP_PROXY
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: responseHeaderTimeout,
	}
}

// NewH2CTransport is NewTransport speaking cleartext HTTP/2 with prior
// knowledge (h2c) only, to http:// URLs: an upstream such as a gRPC server
// without TLS. Its requests share one connection, as HTTP/2 multiplexes them.
func NewH2CTransport(responseHeaderTimeout time.Duration) *http.Transport {
	t := NewTransport(responseHeaderTimeout)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	t.Protocols = &p
	return t
}

// BufferPool recycles the 32 KiB buffers httputil.ReverseProxy copies bodies
// through; without it every response allocates one, and that garbage dominates GC.
type BufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Get implements httputil.BufferPool.
func (BufferPool) Get() []byte { return *buffers.Get().(*[]byte) }

// Put implements httputil.BufferPool.
func (BufferPool) Put(b []byte) { buffers.Put(&b) }
