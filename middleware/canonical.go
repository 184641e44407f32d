package middleware

import (
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
)

// A request is read once, at the entrance, into its canonical form; route
// matching (the proxy's), tracking, the scope and the fingerprint all read that
// form and nothing else. A client that spells the same request another way (the
// method's case, the path's case or encoding, dot segments, ;parameters, the
// Host's case, port or trailing dot) gets the same protection, and a request
// that cannot be read one way only is refused, never forwarded.

// Canonical is a request as the core reads it.
type Canonical struct {
	// Method is the method, upper-cased when it spells a standard or tracked
	// method in another case (Flask, Django, Symfony and ASP.NET run "post" as
	// POST). The core forwards a tracked request with this method.
	Method string
	// Path is the path for the fingerprint: percent-encoding normalized (an
	// unreserved character's escape decoded, hex digits upper-cased), case and
	// ;parameters kept.
	Path string
	// Route is the path for route matching: each segment decoded, its
	// ;parameters removed (Tomcat, Jetty and Spring drop them), lower-cased
	// (Express, ASP.NET and IIS route case-insensitively), each letter as the
	// lower case of its upper case (ſ is s, ı is i, as Unicode-aware matchers
	// fold them), each segment without its trailing dots and spaces (Windows
	// drops them). A trailing slash is kept.
	Route string
	// Host is the Host lower-cased (IDNA names in their ASCII form), without a
	// trailing dot or a default port (80, 443); an IPv6 literal in its RFC 5952
	// form.
	Host string
}

// Canonical-form errors: a request that has no single reading. Their text is
// the 400 problem's detail.
var (
	// ErrNonCanonicalPath: the path has an empty, "." or ".." segment (also as
	// "..;" or "%2e%2e"), an encoded slash, a backslash, or a control character,
	// which upstreams resolve differently.
	ErrNonCanonicalPath = errors.New("non-canonical path")
	// ErrInvalidHost: the Host is not a host name, an IP literal or an IDNA name.
	ErrInvalidHost = errors.New("invalid Host")
)

// pathError is ErrNonCanonicalPath with its reason.
type pathError struct{ reason string }

func (e *pathError) Error() string        { return "the path " + e.reason }
func (e *pathError) Is(target error) bool { return target == ErrNonCanonicalPath }

type hostError struct{ reason string }

func (e *hostError) Error() string        { return "the Host " + e.reason }
func (e *hostError) Is(target error) bool { return target == ErrInvalidHost }

// standardMethods are upper-cased when sent in another case.
var standardMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true, http.MethodTrace: true,
	http.MethodConnect: true,
}

// standardMethod returns m upper-cased when that spells a standard method (and
// m as it is otherwise): "post" and "Post" are POST.
func standardMethod(m string) string {
	if standardMethods[m] {
		return m // the common case: no allocation
	}
	if u := strings.ToUpper(m); standardMethods[u] {
		return u
	}
	return m
}

// CanonicalPath reads an escaped path (URL.EscapedPath) into its fingerprint and
// route forms; see Canonical. An empty path is "/". It fails with an error
// wrapping ErrNonCanonicalPath for an empty, "." or ".." segment, or one of
// dots and spaces alone ("...", ".. ", which Windows reads as "." or "..") (a
// trailing slash is allowed; ";parameters" and percent-encoding do not hide one), an
// encoded "/" or "\", a "\" of any kind, a NUL or control character, or a
// malformed escape.
func CanonicalPath(escaped string) (path, route string, err error) {
	if escaped == "" || escaped == "*" {
		return "/", "/", nil
	}
	if escaped[0] != '/' {
		return "", "", &pathError{"does not start with /"}
	}
	if clean, ok := simplePath(escaped); ok {
		return escaped, clean, nil
	}
	var pb, rb strings.Builder
	pb.Grow(len(escaped))
	rb.Grow(len(escaped))
	segs := strings.Split(escaped[1:], "/")
	for i, seg := range segs {
		pb.WriteByte('/')
		rb.WriteByte('/')
		last := i == len(segs)-1
		name, err := writeSegment(&pb, &rb, seg)
		if err != nil {
			return "", "", err
		}
		switch {
		case name == "" && !last:
			return "", "", &pathError{"has an empty segment (//)"}
		case name == "." || name == "..":
			return "", "", &pathError{"has a \"" + name + "\" segment"}
		case name != "" && strings.TrimRight(name, ". ") == "":
			return "", "", &pathError{"has a segment of dots and spaces (" + strconv.Quote(name) + "), which Windows reads as \".\" or \"..\""}
		}
	}
	return pb.String(), rb.String(), nil
}

// simplePath reports whether p is lower-case letters, digits and -._~ in
// non-empty, non-dot segments (a trailing slash allowed): then it is its own
// canonical form and its route form is itself. This is the fast path.
func simplePath(p string) (string, bool) {
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			seg := p[segStart:i]
			if seg == "" && i != len(p) || strings.HasSuffix(seg, ".") {
				return "", false // also ".", ".." and "stripe.": see writeSegment
			}
			segStart = i + 1
			continue
		}
		c := p[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			continue
		}
		return "", false
	}
	return p, true
}

// writeSegment writes one escaped segment's fingerprint form to pb and its route
// form (decoded, without ;parameters, lower-cased, without trailing dots and
// spaces, which Windows drops: "stripe." and "stripe " open "stripe") to rb, and
// returns the decoded name (before any ";").
func writeSegment(pb, rb *strings.Builder, seg string) (string, error) {
	var name strings.Builder
	inParams := false
	for j := 0; j < len(seg); j++ {
		c := seg[j]
		decoded := c
		if c == '%' {
			if j+2 >= len(seg) || !isHex(seg[j+1]) || !isHex(seg[j+2]) {
				return "", &pathError{"has a malformed %-escape"}
			}
			decoded = unhex(seg[j+1])<<4 | unhex(seg[j+2])
			if unreserved(decoded) {
				pb.WriteByte(decoded)
			} else {
				pb.WriteByte('%')
				pb.WriteByte(upperHex(seg[j+1]))
				pb.WriteByte(upperHex(seg[j+2]))
			}
			j += 2
		} else {
			pb.WriteByte(c)
		}
		switch {
		case decoded == '/':
			return "", &pathError{"has an encoded slash (%2F)"}
		case decoded == '\\':
			return "", &pathError{"has a backslash, which some servers read as /"}
		case decoded < 0x20 || decoded == 0x7f:
			return "", &pathError{"has a control character"}
		}
		if inParams {
			continue
		}
		if decoded == ';' {
			inParams = true
			continue
		}
		name.WriteByte(decoded)
	}
	n := name.String()
	rb.WriteString(foldCase(strings.TrimRight(n, ". ")))
	return n, nil
}

// foldCase is s in the route form's case: each letter is the lower case of its
// upper case. strings.ToLower alone leaves the letters that are lower case
// already but whose upper case is another letter's, ſ (U+017F, upper case S)
// and ı (U+0131, upper case I): Python's re.IGNORECASE, JavaScript's /iu,
// Java's equalsIgnoreCase and strings.EqualFold read "/chargeſ" as "/charges",
// and a route must not miss what an upstream so matched reaches.
func foldCase(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, s)
		}
	}
	return strings.ToLower(s)
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func upperHex(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// unreserved reports whether c is an RFC 3986 unreserved character, whose
// escape means the character itself.
func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// CanonicalHost reads a Host header (or URL host): lower-case, IDNA names in
// their ASCII form, one trailing dot removed, the port removed when it is 80 or
// 443 (and written without leading zeros otherwise), an IPv6 literal in its
// RFC 5952 form. An empty Host (HTTP/1.0) stays empty. Anything else that is not
// a DNS name or an IP literal fails with an error wrapping ErrInvalidHost.
func CanonicalHost(h string) (string, error) {
	if h == "" {
		return "", nil
	}
	if simpleHost(h) {
		return h, nil
	}
	host, port := h, ""
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", &hostError{"has an unterminated IPv6 literal"}
		}
		host, port = h[:end+1], h[end+1:]
		if port != "" && port[0] != ':' {
			return "", &hostError{"has text after its IPv6 literal"}
		}
		port = strings.TrimPrefix(port, ":")
		ip, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", &hostError{"is not a valid IPv6 literal"}
		}
		host = "[" + ip.String() + "]"
	} else {
		if i := strings.LastIndexByte(h, ':'); i >= 0 {
			host, port = h[:i], h[i+1:]
		}
		var err error
		if host, err = canonicalName(host); err != nil {
			return "", err
		}
	}
	if port != "" || strings.HasSuffix(h, ":") {
		n, err := strconv.ParseUint(port, 10, 16)
		switch {
		case port == "":
			// "host:" means the default port
		case err != nil:
			return "", &hostError{"has a port that is not a number from 0 to 65535"}
		case n == 80 || n == 443:
		default:
			return host + ":" + strconv.FormatUint(n, 10), nil
		}
	}
	return host, nil
}

// simpleHost reports whether h is already canonical: lower-case letters, digits,
// '-' and non-empty dot-separated labels, not ending in a dot, with no port or a
// port that is not a default one written plainly.
func simpleHost(h string) bool {
	labelLen := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-':
			labelLen++
		case c == '.':
			if labelLen == 0 || labelLen > 63 {
				return false
			}
			labelLen = 0
		case c == ':':
			port := h[i+1:]
			if labelLen == 0 || port == "" || port[0] == '0' || port == "80" || port == "443" || len(port) > 5 {
				return false
			}
			for j := 0; j < len(port); j++ {
				if port[j] < '0' || port[j] > '9' {
					return false
				}
			}
			n, _ := strconv.Atoi(port)
			return n <= 65535
		default:
			return false
		}
	}
	return labelLen > 0 && labelLen <= 63 && len(h) <= 253
}

var idnaProfile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(false),
	idna.ValidateLabels(true), idna.VerifyDNSLength(true))

// canonicalName is a host name (or IPv4 literal) in canonical form.
func canonicalName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return "", &hostError{"has no name"}
	}
	ascii := true
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if !ascii {
		a, err := idnaProfile.ToASCII(name)
		if err != nil {
			return "", &hostError{"is not a valid internationalized domain name"}
		}
		name = a
	} else {
		name = strings.ToLower(name)
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		if !ip.Is4() {
			return "", &hostError{"has an IPv6 address without brackets"}
		}
		return ip.String(), nil
	}
	if len(name) > 253 {
		return "", &hostError{"is longer than 253 characters"}
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return "", &hostError{"has an empty or over-long label"}
		}
		for j := 0; j < len(label); j++ {
			c := label[j]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", &hostError{"has a character that is not a letter, digit, '-' or '_'"}
			}
		}
	}
	return name, nil
}

// Canonicalize reads r into its canonical form; see Canonical. It changes
// nothing in r. A path that has no canonical form is an error wrapping
// ErrNonCanonicalPath; a Host that has none, one wrapping ErrInvalidHost,
// with the method and path read (a router can still pick a route).
func Canonicalize(r *http.Request) (Canonical, error) {
	path, route, err := CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		return Canonical{}, err
	}
	c := Canonical{Method: standardMethod(r.Method), Path: path, Route: route}
	if c.Host, err = CanonicalHost(r.Host); err != nil {
		return c, err
	}
	return c, nil
}

// canonicalMethod is standardMethod, also upper-casing a tracked custom method.
func (c *compiled) canonicalMethod(m string) string {
	if cm := standardMethod(m); cm != m || c.tracked[m] {
		return cm
	}
	if u := strings.ToUpper(m); c.tracked[u] {
		return u
	}
	return m
}
