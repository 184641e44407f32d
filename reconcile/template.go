package reconcile

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/middleware"
)

// Bounds on what a reconcile request may be: its template, and the request
// rendered from a client's request (its URL and copied headers), which is kept
// in the store until the key settles.
const (
	MaxTemplate = 2048
	MaxRendered = 16 << 10
)

// Request is a reconcile request as configured: "GET /v1/charges?key={key}".
// The URL is a path and query on the upstream; its placeholders are filled in
// from the first execution's request: {key} (the client's idempotency key),
// {header.NAME} (that request header's first value), {json:/pointer} (the
// string at an RFC 6901 pointer in its JSON body, read as key_source json:
// reads it). After the "?", a value is escaped as a query value, whatever it
// is. Before it, a value is written as it is, and only a value that stays one
// literal path segment on every upstream is: see pathValue. A placeholder
// with nothing to fill it (a header the request did not carry), or with a
// value the path cannot take, leaves the key held for an operator.
type Request struct {
	Method string
	parts  []part
	spec   string
}

type part struct {
	lit   string
	kind  byte // 0: literal; 'k': key; 'h': header; 'j': JSON pointer
	arg   string
	query bool // after the '?': escaped as a query value
	json  keysource.JSON
}

// ParseRequest parses "METHOD /path?query" with placeholders.
func ParseRequest(spec string) (*Request, error) {
	if len(spec) > MaxTemplate {
		return nil, fmt.Errorf("longer than %d bytes", MaxTemplate)
	}
	method, tmpl, ok := strings.Cut(strings.TrimSpace(spec), " ")
	tmpl = strings.TrimSpace(tmpl)
	if !ok || method == "" || tmpl == "" {
		return nil, fmt.Errorf("%q: want METHOD /path?query, e.g. GET /v1/charges?idempotency_key={key}", spec)
	}
	for _, c := range method {
		if c < 'A' || c > 'Z' {
			return nil, fmt.Errorf("method %q: want an upper-case method (GET)", method)
		}
	}
	if !strings.HasPrefix(tmpl, "/") || strings.HasPrefix(tmpl, "//") {
		return nil, fmt.Errorf("%q: the URL is a path on the upstream, starting with one /", tmpl)
	}
	r := &Request{Method: method, spec: spec}
	query := false
	for tmpl != "" {
		i := strings.IndexAny(tmpl, "{}")
		if i < 0 {
			i = len(tmpl)
		}
		if lit := tmpl[:i]; lit != "" {
			if err := checkLiteral(lit); err != nil {
				return nil, err
			}
			r.parts = append(r.parts, part{lit: lit})
			query = query || strings.Contains(lit, "?")
		}
		tmpl = tmpl[i:]
		if tmpl == "" {
			break
		}
		end := strings.IndexByte(tmpl, '}')
		if tmpl[0] == '}' || end < 0 {
			return nil, errors.New("unbalanced { } in the URL")
		}
		p, err := placeholder(tmpl[1:end])
		if err != nil {
			return nil, err
		}
		p.query = query
		r.parts = append(r.parts, p)
		tmpl = tmpl[end+1:]
	}
	return r, nil
}

func placeholder(name string) (part, error) {
	switch {
	case name == "key":
		return part{kind: 'k'}, nil
	case strings.HasPrefix(name, "header.") && len(name) > len("header."):
		h := name[len("header."):]
		if strings.ContainsAny(h, " :\t") {
			return part{}, fmt.Errorf("{%s}: not a header name", name)
		}
		return part{kind: 'h', arg: http.CanonicalHeaderKey(h)}, nil
	case strings.HasPrefix(name, "json:"):
		j, err := keysource.NewJSON(name[len("json:"):])
		if err != nil {
			return part{}, fmt.Errorf("{%s}: %v", name, err)
		}
		return part{kind: 'j', arg: name[len("json:"):], json: j}, nil
	}
	return part{}, fmt.Errorf("{%s}: want {key}, {header.NAME} or {json:/pointer}", name)
}

// checkLiteral refuses what would make the URL read another way than
// written: spaces, control characters, a fragment.
func checkLiteral(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f || c == '#' {
			return fmt.Errorf("%q: the URL may not contain spaces, control characters or #", s)
		}
	}
	return nil
}

// pathValue says why v cannot be written into a path ("" when it can). A
// value in a path must stay one literal segment, or part of one, on every
// upstream and every proxy before it, whatever they normalise: so it is made
// of RFC 3986 unreserved characters only (letters, digits, "-", ".", "_",
// "~"), which no one decodes, splits or resolves, and it does not end in a
// dot. That refuses a value that is or contains a separator ("/", "\", "?",
// "#"), a percent-encoding, decoded once or twice ("%2e%2e" is ".."
// to a normalising upstream, "%252e" after a second decoding), a ";"
// parameter (Tomcat reads "..;" as ".."), a dot segment ("." and ".."; any
// value of dots only), a trailing dot (IIS and Windows drop it: "k." would ask
// about "k"), and the empty value (an empty segment, which "//" normalisation
// removes). Escaping instead would not do: what an escape means is up to each
// upstream.
func pathValue(v string) string {
	if v == "" {
		return "is empty"
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return "has a character other than letters, digits and - . _ ~"
		}
	}
	if v[len(v)-1] == '.' {
		return "ends in '.'"
	}
	return ""
}

// String is the placeholder as written in the template.
func (p part) String() string {
	switch p.kind {
	case 'k':
		return "{key}"
	case 'h':
		return "{header." + p.arg + "}"
	case 'j':
		return "{json:" + p.arg + "}"
	}
	return p.lit
}

// NeedsBody reports whether a placeholder reads the body.
func (r *Request) NeedsBody() bool {
	for _, p := range r.parts {
		if p.kind == 'j' {
			return true
		}
	}
	return false
}

// String is the request as configured.
func (r *Request) String() string { return r.spec }

// Render fills the placeholders from the held request.
func (r *Request) Render(h middleware.Held) (string, error) {
	var b strings.Builder
	for _, p := range r.parts {
		var v string
		switch p.kind {
		case 0:
			b.WriteString(p.lit)
			continue
		case 'k':
			v = h.Key
		case 'h':
			v = h.Request.Header.Get(p.arg)
			if v == "" {
				return "", fmt.Errorf("{header.%s}: the request carried no %s header", p.arg, p.arg)
			}
		case 'j':
			var err error
			if v, err = p.json.Key(h.Request, h.Body); err != nil {
				return "", fmt.Errorf("{json:%s}: %v", p.arg, err)
			}
		}
		if p.query {
			b.WriteString(url.QueryEscape(v))
		} else if why := pathValue(v); why != "" {
			return "", fmt.Errorf("%s: its value %s: in the path it could move the request to another path on the upstream, "+
				"so none is sent; place %s in the query instead (?name=%s), where any value is escaped", p, why, p, p)
		} else {
			b.WriteString(v)
		}
		if b.Len() > MaxRendered {
			return "", fmt.Errorf("the rendered URL is longer than %d bytes", MaxRendered)
		}
	}
	return b.String(), nil
}
