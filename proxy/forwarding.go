package proxy

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"

	"github.com/idemproxy/idemproxy/middleware"
)

// UpstreamHost values besides a literal host.
const (
	UpstreamHostUpstream = "upstream" // the upstream URL's host (the default)
	UpstreamHostClient   = "client"   // the Host the client sent
)

// maxHops bounds the addresses of an X-Forwarded-For chain and the elements of
// a Forwarded header a trusted proxy may pass: a longer one is replaced, as a
// malformed one is.
const maxHops = 32

// maxRequestID bounds a request id taken from a trusted proxy.
const maxRequestID = 128

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

// parsePrefixes reads trusted_proxies: CIDRs, or addresses (one host each).
func parsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%q: want a CIDR (10.0.0.0/8, fd00::/8) or an address", s)
			}
			if p.Addr().Is4In6() {
				return nil, fmt.Errorf("%q: write an IPv4 CIDR as such (10.0.0.0/8)", s)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q: want a CIDR (10.0.0.0/8, fd00::/8) or an address", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// validUpstreamHost checks upstream_host: upstream, client, or host[:port].
func validUpstreamHost(s string) error {
	if s == UpstreamHostUpstream || s == UpstreamHostClient {
		return nil
	}
	if !validHost(s) {
		return errors.New("want upstream, client, or a host[:port] such as api.example.com")
	}
	return nil
}

// validHost reports whether s is a host name or IP address, with an optional
// port: what a Host or X-Forwarded-Host may carry.
func validHost(s string) bool {
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
			return false
		}
		host = h
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Zone() == "" && (a.Is4() || host != s) // IPv6 with a port is [bracketed]
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		return err == nil && a.Is6() && a.Zone() == ""
	}
	return len(host) <= 253 && hostName.MatchString(host)
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

// A request id is 26 characters of the base32 alphabet (A–Z, 2–7), 130 random
// bits: the form crypto/rand.Text gives, which the proxy used before. Drawn
// from the operating system per request, those bits cost a getrandom call
// each (0.1 µs or so through the vDSO of Linux 6.11 and later, 0.5 µs as the
// system call of earlier kernels); they now come from a pool of ChaCha8
// generators, each seeded with 32 bytes of crypto/rand when the pool makes it
// (at start, and again when a garbage collection has emptied the pool): a
// little less than the vDSO call, in user space (BENCHMARKS.md, issue 27).
//
// What a request id needs is that it cannot be predicted or counted (a
// counter would tell the request volume, and a guessable id could be planted
// in someone else's trail) and that it does not repeat, across processes and
// restarts too. It is no secret: nothing is authorised by it. math/rand/v2's
// ChaCha8 is documented as a cryptographically strong generator (the one the
// Go runtime itself uses), rekeying itself from its own output every
// kilobyte, so that a memory dump tells at most the last few dozen ids of a
// generator (which the logs hold anyway): with a secret 256-bit seed per
// generator, an id tells nothing of any other, and two ids repeat only by a
// 130-bit coincidence. (The package as a whole warns against
// security-sensitive use; ChaCha8 is the generator it documents as
// cryptographically strong. Its top-level functions are not used: their
// source is not documented as such, and is shared with the whole process.) A
// generator serves one request at a time, without a lock; the pool keeps one
// per busy goroutine rather than one per request.
var idSources = sync.Pool{New: func() any {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails (it aborts the process instead)
	return rand.NewChaCha8(seed)
}}

const base32Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// requestIDLen characters of 5 bits: ⌈128/5⌉, as crypto/rand.Text.
const requestIDLen = 26

func newRequestID() string {
	var b [requestIDLen]byte
	src := idSources.Get().(*rand.ChaCha8)
	_, _ = src.Read(b[:])
	idSources.Put(src)
	for i := range b {
		b[i] = base32Alphabet[b[i]%32] // 256 is a multiple of 32: uniform
	}
	return string(b[:])
}

// single returns the one value of a header sent once.
func single(vals []string) (string, bool) {
	if len(vals) != 1 {
		return "", false
	}
	return strings.TrimSpace(vals[0]), true
}

// forwardedFor parses an X-Forwarded-For chain, over every line of it: each
// entry an IP address (IPv6 possibly in brackets), at most maxHops.
func forwardedFor(lines []string) ([]netip.Addr, bool) {
	if len(lines) == 0 {
		return nil, true
	}
	var chain []netip.Addr
	for _, line := range lines {
		for e := range strings.SplitSeq(line, ",") {
			e = strings.TrimSpace(e)
			if strings.HasPrefix(e, "[") && strings.HasSuffix(e, "]") {
				e = e[1 : len(e)-1]
			}
			a, err := netip.ParseAddr(e)
			if err != nil || a.Zone() != "" || len(chain) == maxHops {
				return nil, false
			}
			chain = append(chain, a.Unmap())
		}
	}
	return chain, true
}

// validForwarded checks a Forwarded header (RFC 7239) over every line: elements
// of token=value pairs, a value a token or a quoted string, at most maxHops.
func validForwarded(lines []string) bool {
	n := 0
	for _, line := range lines {
		for elem := range strings.SplitSeq(line, ",") {
			if n++; n > maxHops {
				return false
			}
			for pair := range strings.SplitSeq(strings.TrimSpace(elem), ";") {
				name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !isToken(name) || !(isToken(value) || isQuoted(value)) {
					return false
				}
			}
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token.
var isToken = httpguts.ValidHeaderFieldName

// isQuoted reports whether s is a quoted string without escapes or control
// characters (the form a node or host takes: "[2001:db8::1]:4711").
func isQuoted(s string) bool {
	return len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' && quotable(s[1:len(s)-1])
}

// quotable reports whether s can be put in quotes as it is: no quote,
// backslash or control character.
func quotable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// validRequestID: 1 to maxRequestID visible ASCII characters, none of which
// would need quoting in a log line or a header list.
func validRequestID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == ',' || c == ';' {
			return false
		}
	}
	return true
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
