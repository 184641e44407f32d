package proxy

import "net/http"

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
