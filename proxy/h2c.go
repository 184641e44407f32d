package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/idemproxy/idemproxy/internal/forward"
)

// gRPC's transports (docs/grpc.md): the client listener serves HTTP/2 beside
// HTTP/1.1, over TLS (ALPN h2) and without it (h2c with prior knowledge, what
// a gRPC client with insecure credentials dials); an upstream URL
// h2c://host:port is a cleartext HTTP/2 upstream, such as a gRPC server
// without TLS (https:// speaks HTTP/2 already, by ALPN).

// h2cScheme is the upstream URL scheme of a cleartext HTTP/2 upstream.
const h2cScheme = "h2c"

// clientProtocols are the protocols of the client listener: HTTP/1.1, and
// HTTP/2 over TLS or, without TLS, with prior knowledge (h2c). (HTTP/1.1's
// Upgrade: h2c is not offered: gRPC clients do not use it.)
func clientProtocols(tls bool) *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	if tls {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &p
}

// upstreamURL parses the upstream URL: http://, https:// or h2c:// with a
// host. An h2c:// URL is sent to as http://, over cleartext HTTP/2 (h2c).
func upstreamURL(raw string) (u *url.URL, h2c bool, err error) {
	u, err = url.Parse(raw)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" && u.Scheme != h2cScheme {
		return nil, false, fmt.Errorf("want an absolute http://, https:// or h2c:// URL")
	}
	if u.Scheme == h2cScheme {
		c := *u
		c.Scheme = "http"
		return &c, true, nil
	}
	return u, false, nil
}

// newUpstreamTransport is the transport to the upstream URL raw (checked by
// Validate): HTTP/1.1 or, over TLS, HTTP/2; only cleartext HTTP/2 to an h2c://
// upstream.
func newUpstreamTransport(raw string, responseHeaderTimeout time.Duration) *http.Transport {
	if _, h2c, _ := upstreamURL(raw); h2c {
		return forward.NewH2CTransport(responseHeaderTimeout)
	}
	return forward.NewTransport(responseHeaderTimeout)
}

// sameTransport reports whether a configuration with upstream URL b and
// upstream_timeout tb can keep the transport of one with a and ta.
func sameTransport(a string, ta time.Duration, b string, tb time.Duration) bool {
	_, ha, _ := upstreamURL(a)
	_, hb, _ := upstreamURL(b)
	return ta == tb && ha == hb
}
