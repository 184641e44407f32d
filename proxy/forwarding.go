package proxy

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"

	"github.com/idemproxy/idemproxy/middleware"
)

// UpstreamHost values besides a literal host.
const (
	UpstreamHostUpstream = "upstream" // the upstream URL's host (the default)
	UpstreamHostClient   = "client"   // the Host the client sent
)

// forwarding is how the proxy passes on who the client was: the
// X-Forwarded-For, -Proto, -Host and Forwarded headers, the Host and the
// request id.
type forwarding struct {
	trusted  []netip.Prefix
	host     string // upstream_host
	idHeader string // canonical; "" when none is sent
}

func newForwarding(cfg *Config) (*forwarding, error) {
	trusted, err := parsePrefixes(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	f := &forwarding{trusted: trusted, host: cfg.UpstreamHost}
	if cfg.RequestIDHeader != "" {
		f.idHeader = http.CanonicalHeaderKey(cfg.RequestIDHeader)
	}
	return f, nil
}

func (f *forwarding) trusts(a netip.Addr) bool {
	for _, p := range f.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// reqInfo is what the proxy knows of a request beyond it, for its log lines
// (logHandler) and its upstream request (rewrite).
type reqInfo struct {
	peer      netip.Addr // who connected; invalid if RemoteAddr does not parse
	node      string     // peer as text ("" if invalid): what rewrite appends
	client    string     // the client's address (see inbound)
	requestID string
	route     string    // the route's path; "" before routing, "(top level)"
	idValue   [1]string // the request id header's value, allocated with the rest
	tls       bool
	realIP    bool // a trusted proxy's X-Real-IP is kept (else rewrite sets it)
}

type reqInfoKey struct{}

// requestInfo is what a record keeps of r beyond it (Settings.RequestInfo):
// what the proxy's log lines carry.
func requestInfo(r *http.Request) middleware.RequestInfo {
	info := infoOf(r.Context())
	if info == nil {
		return middleware.RequestInfo{ID: r.Header.Get("X-Request-Id"), Client: r.RemoteAddr}
	}
	return middleware.RequestInfo{ID: info.requestID, Client: info.client, Route: info.route}
}

func infoOf(ctx context.Context) *reqInfo {
	info, _ := ctx.Value(reqInfoKey{}).(*reqInfo)
	return info
}

// inbound reads who sent r before anything else does. From a peer in
// trusted_proxies, the forwarding and address headers it sent are kept (each
// if well formed), and the client is the last address of the X-Forwarded-For
// chain that is not a trusted proxy's. From any other peer they are removed
// (addressheaders.go), so neither the core (scope_headers,
// fingerprint_headers), the logs nor the upstream ever see what a client
// claims: the client is the peer. The request id is kept from a trusted peer
// when well formed, generated otherwise.
func (f *forwarding) inbound(r *http.Request) *reqInfo {
	info := &reqInfo{tls: r.TLS != nil}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		info.peer = ap.Addr().Unmap()
		info.node = info.peer.String()
		info.client = info.node
	} else {
		info.client = r.RemoteAddr
	}
	h := r.Header
	trusted := info.peer.IsValid() && f.trusts(info.peer)
	info.realIP = dropAddressHeaders(h, trusted)
	if trusted {
		if chain, ok := forwardedFor(h["X-Forwarded-For"]); ok {
			client := info.peer
			for i := len(chain) - 1; i >= 0 && f.trusts(client); i-- {
				client = chain[i]
			}
			info.client = client.String()
		} else {
			delete(h, "X-Forwarded-For")
		}
		if v, ok := single(h["X-Forwarded-Proto"]); !ok || !strings.EqualFold(v, "http") && !strings.EqualFold(v, "https") {
			delete(h, "X-Forwarded-Proto")
		} else {
			h["X-Forwarded-Proto"] = []string{strings.ToLower(v)}
		}
		if v, ok := single(h["X-Forwarded-Host"]); !ok || !validHost(v) {
			delete(h, "X-Forwarded-Host")
		}
		if !validForwarded(h["Forwarded"]) {
			delete(h, "Forwarded")
		}
	}
	if f.idHeader != "" {
		if v, ok := single(h[f.idHeader]); trusted && ok && validRequestID(v) {
			info.requestID = v
		}
	}
	if info.requestID == "" {
		info.requestID = newRequestID()
	}
	if f.idHeader != "" {
		info.idValue[0] = info.requestID
		h[f.idHeader] = info.idValue[:]
	}
	return info
}

// rewrite sets the forwarding headers, X-Real-IP (the client, unless a
// trusted proxy sent one) and the Host of the upstream request. ReverseProxy
// has already removed X-Forwarded-For, -Proto, -Host and Forwarded from
// pr.Out; pr.In carries only what inbound kept.
//
// It runs on every proxied request, so it allocates little: the values it
// sets share one backing array (each slice capped at its one value, as
// http.Header.Clone does), each list is built in one strings.Builder of the
// length it needs, and the peer's address is the text inbound made. The
// header map itself still grows once past its small size (eight entries) on a
// request with more than four headers: ReverseProxy sized its clone for the
// request's headers, and these four come on top. Swapping in a larger map
// costs as much as the growth (one allocation more, the same instructions).
func (f *forwarding) rewrite(pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out.Header
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	var node, client string
	realIP := false // an X-Real-IP is kept
	if info := infoOf(in.Context()); info != nil && info.peer.IsValid() {
		node, client, realIP = info.node, info.client, info.realIP
	} else if ap, err := netip.ParseAddrPort(in.RemoteAddr); err == nil {
		node = ap.Addr().Unmap().String()
		client, realIP = node, len(in.Header["X-Real-Ip"]) > 0
	}
	vals := make([]string, 5)
	if node != "" {
		vals[0] = joinPrior(in.Header["X-Forwarded-For"], node)
		out["X-Forwarded-For"] = vals[0:1:1]
	}
	if client != "" && !realIP {
		vals[4] = client
		out["X-Real-Ip"] = vals[4:5:5]
	}
	if v := in.Header["X-Forwarded-Proto"]; len(v) == 1 {
		out["X-Forwarded-Proto"] = v
	} else {
		vals[1] = proto
		out["X-Forwarded-Proto"] = vals[1:2:2]
	}
	if v := in.Header["X-Forwarded-Host"]; len(v) == 1 {
		out["X-Forwarded-Host"] = v
	} else if in.Host != "" {
		vals[2] = in.Host
		out["X-Forwarded-Host"] = vals[2:3:3]
	}
	vals[3] = forwarded(in.Header["Forwarded"], node, proto, in.Host)
	out["Forwarded"] = vals[3:4:4]
	if h := f.upstreamHost(in.Host); h != "" {
		pr.Out.Host = h
	}
}

// upstreamHost is the Host of a request the proxy sends upstream for a
// client's request addressed to host, under upstream_host: the one place that
// decides it, for a forwarded request (rewrite) and a reconcile request
// (reconcilePrepare) alike, so that the two never differ. "" means the
// upstream URL's host. Under client it is host in canonical form
// (middleware.CanonicalHost: lower case, without a default port or a trailing
// dot), the Host as the core read it and as a reconcile job keeps it; a Host
// that has no canonical form (an untracked request's) goes as it came.
func (f *forwarding) upstreamHost(host string) string {
	switch f.host {
	case UpstreamHostUpstream:
		return ""
	case UpstreamHostClient:
		if c, err := middleware.CanonicalHost(host); err == nil {
			return c
		}
		return host
	}
	return f.host
}

// joinPrior returns the lines of a list header a trusted proxy sent and this
// hop's entry as one line, joined by ", ": in one allocation, none when there
// was no such header.
func joinPrior(prior []string, last string) string {
	if len(prior) == 0 {
		return last
	}
	var b strings.Builder
	b.Grow(priorLen(prior) + len(last))
	writePrior(&b, prior)
	b.WriteString(last)
	return b.String()
}

// priorLen is what writePrior writes.
func priorLen(prior []string) int {
	n := 0
	for _, p := range prior {
		n += len(p) + len(", ")
	}
	return n
}

// writePrior writes the lines a trusted proxy sent, each followed by ", ".
func writePrior(b *strings.Builder, prior []string) {
	for _, p := range prior {
		b.WriteString(p)
		b.WriteString(", ")
	}
}

// forwarded returns the Forwarded header sent upstream: the lines a trusted
// proxy sent, then this hop's element, for=node;proto=…;host=…, the node
// "[quoted]" when IPv6 and left out when unknown, the host a token or a
// quoted string and left out when it can be neither. One allocation.
func forwarded(prior []string, node, proto, host string) string {
	quoteNode := strings.Contains(node, ":")
	quoteHost := host != "" && !isToken(host)
	if quoteHost && !quotable(host) {
		host = ""
	}
	var b strings.Builder
	b.Grow(priorLen(prior) + len(`for="[]";proto=;host=""`) + len(node) + len(proto) + len(host))
	writePrior(&b, prior)
	if node != "" {
		b.WriteString("for=")
		if quoteNode {
			b.WriteString(`"[`)
			b.WriteString(node)
			b.WriteString(`]"`)
		} else {
			b.WriteString(node)
		}
		b.WriteByte(';')
	}
	b.WriteString("proto=")
	b.WriteString(proto)
	if host != "" {
		b.WriteString(";host=")
		if quoteHost {
			b.WriteByte('"')
			b.WriteString(host)
			b.WriteByte('"')
		} else {
			b.WriteString(host)
		}
	}
	return b.String()
}
