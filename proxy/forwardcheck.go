package proxy

// What the forwarding settings (trusted_proxies, upstream_host) and the
// forwarding headers a trusted proxy sends must look like to be kept.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// maxHops bounds the addresses of an X-Forwarded-For chain and the elements of
// a Forwarded header a trusted proxy may pass: a longer one is replaced, as a
// malformed one is.
const maxHops = 32

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
