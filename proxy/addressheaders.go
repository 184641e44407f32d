package proxy

import (
	"net/http"
	"net/netip"
	"strings"
)

// Headers in which a proxy or CDN tells the upstream who the client was are
// the proxy's to set: from a peer that is not a trusted proxy they are
// removed (inbound), and X-Real-IP, which many read, is set to the client the
// proxy saw (rewrite), as X-Forwarded-For and Forwarded are. From a trusted
// proxy they are kept, but for spellings with an underscore.
//
// addressHeaders are those beyond Forwarded and the X-Forwarded- family, as
// frameworks and platforms read them, in lower case: chi's RealIP
// (True-Client-IP, then X-Real-IP), nginx realip (X-Real-IP), Rails
// (Client-IP), gin's trusted platforms (CF-Connecting-IP, Fly-Client-IP,
// X-Appengine-Remote-Addr), Akamai and Cloudflare Enterprise
// (True-Client-IP), Cloudflare, Fastly, Azure Front Door, Envoy, Netlify,
// Vercel, DigitalOcean, WebLogic (WL-Proxy-Client-IP, Proxy-Client-IP), and
// the header lists of client-address helpers (X-Client-IP,
// X-Cluster-Client-IP, X-Originating-IP, X-Forwarded, Forwarded-For, …).
var addressHeaders = map[string]bool{
	"x-real-ip":                 true,
	"true-client-ip":            true,
	"cf-connecting-ip":          true,
	"cf-connecting-ipv6":        true,
	"cf-pseudo-ipv4":            true,
	"fastly-client-ip":          true,
	"x-client-ip":               true,
	"x-cluster-client-ip":       true,
	"x-originating-ip":          true,
	"client-ip":                 true,
	"x-forwarded":               true,
	"forwarded":                 true,
	"forwarded-for":             true,
	"x-original-forwarded-for":  true,
	"fly-client-ip":             true,
	"do-connecting-ip":          true,
	"x-appengine-user-ip":       true,
	"x-appengine-remote-addr":   true,
	"x-azure-clientip":          true,
	"x-azure-socketip":          true,
	"x-envoy-external-address":  true,
	"proxy-client-ip":           true,
	"wl-proxy-client-ip":        true,
	"x-proxyuser-ip":            true,
	"x-remote-ip":               true,
	"x-remote-addr":             true,
	"x-nf-client-connection-ip": true,
	"x-vercel-forwarded-for":    true,
}

// xForwarded is the family of headers of proxies (For, Proto, Host, Port,
// Prefix, Ssl, Client-Cert, …), all claims about the client's connection.
const xForwarded = "x-forwarded-"

// addressNameMax bounds the names looked up in addressHeaders (the longest
// is 25 bytes).
const addressNameMax = 32

// addressFilter is what the names in addressHeaders have in common: their
// lengths (a bit each) and their first and last bytes, in both cases. Most
// headers of a request (Authorization, Content-Type, Content-Length, Accept,
// X-Request-Id) fail one of them and cost no more.
var addressFilter = func() (f struct {
	lengths     uint64
	first, last [256]bool
}) {
	for name := range addressHeaders {
		first, last := name[0], name[len(name)-1]
		f.lengths |= 1 << len(name)
		f.first[first], f.last[last] = true, true
		f.first[first&^0x20] = true // the names start with a letter
		if 'a' <= last && last <= 'z' {
			f.last[last&^0x20] = true
		}
	}
	return f
}()

// claimsAddress reports whether a header named name tells who the client was:
// Forwarded, an X-Forwarded- header or one of addressHeaders, in any case and
// with '_' read as '-' (CGI-style servers read X_Real_IP as X-Real-IP:
// HTTP_X_REAL_IP); and whether name has an underscore. It allocates nothing.
func claimsAddress(name string) (claims, underscore bool) {
	if xForwardedPrefix(name) {
		return true, strings.IndexByte(name, '_') >= 0
	}
	f := &addressFilter
	if len(name) > addressNameMax || f.lengths&(1<<len(name)) == 0 || !f.first[name[0]] || !f.last[name[len(name)-1]] {
		return false, false
	}
	var buf [addressNameMax]byte
	for i := range len(name) {
		c := name[i]
		switch {
		case c == '_':
			c, underscore = '-', true
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	if !addressHeaders[string(buf[:len(name)])] {
		return false, false
	}
	return true, underscore
}

// xForwardedPrefix reports whether name starts with X-Forwarded-, in any
// case and with '_' for '-': its first twelve bytes ORed with 0x20 (which
// folds a letter's case and leaves '-' as it is), compared as two words. No
// other byte of a header name folds to one of the prefix's: header names hold
// no control characters.
func xForwardedPrefix(name string) bool {
	if len(name) < len(xForwarded) || name[0]|0x20 != 'x' {
		return false
	}
	w8, w4 := word8(name), word4(name[8:])
	if name[1] == '_' {
		w8 = w8&^0xff00 | '-'<<8
	}
	if name[11] == '_' {
		w4 = w4&^0xff000000 | '-'<<24
	}
	return w8|0x2020202020202020 == xForwarded8 && w4|0x20202020 == xForwarded4
}

// xForwarded8 and xForwarded4 are the words xForwardedPrefix compares with.
var xForwarded8, xForwarded4 = word8(xForwarded), word4(xForwarded[8:])

// word8 and word4 are the first 8 and 4 bytes of s, little-endian.
func word8(s string) uint64 {
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func word4(s string) uint32 {
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// dropAddressHeaders removes from h what a peer claims about the client: from
// a peer that is not a trusted proxy every such header, from a trusted one
// only their spellings with an underscore, which no proxy sends, and an
// X-Real-IP that is not one address (repeated, which one is right cannot be
// told). It reports whether an X-Real-IP is left: else rewrite sets it.
func dropAddressHeaders(h http.Header, trusted bool) (realIP bool) {
	for name := range h {
		if claims, underscore := claimsAddress(name); claims && (underscore || !trusted) {
			delete(h, name)
		}
	}
	if v, ok := h["X-Real-Ip"]; ok { // only from a trusted proxy
		if len(v) == 1 && isAddr(strings.TrimSpace(v[0])) {
			return true
		}
		delete(h, "X-Real-Ip")
	}
	return false
}

// isAddr reports whether s is an IP address without a zone.
func isAddr(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}
