// Package fingerprint reads a request body as its clients mean it, for the
// idempotency fingerprint (middleware.BodyFingerprint): a retry serialised anew
// means the same request and replays; one that means something else still gets
// 422, naming the part that differs.
//
//   - JSON: RFC 8785 canonical form (members sorted by their names' UTF-16
//     code units, numbers as ECMAScript writes them, strings minimally
//     escaped), with JSON pointers left out (a request_time). The parts are
//     the top-level members (or elements).
//   - Form: application/x-www-form-urlencoded fields, sorted by name; a
//     repeated field keeps the order of its values, and names an upstream
//     reads as one variable (in another case, PHP's "a.b" and "a_b", a[x]
//     under a) keep theirs. The parts are the fields, and that order.
//   - Multipart: the parts in order, each by the headers that carry meaning
//     (of a multipart/form-data part Content-Disposition, Content-Type and
//     Content-Transfer-Encoding; of other types every header) and its body,
//     never the boundary.
//
// A body that cannot be read one way only is refused (the core answers 400 and
// forwards nothing), never fingerprinted as bytes: a duplicate member name, two
// that differ only in case (internal/fold: as Go's encoding/json matches struct
// fields, or .NET and Java ignore case), a number that an IEEE 754 double does
// not hold exactly, invalid UTF-8, a lone
// surrogate, nesting beyond MaxDepth, more than MaxValues values, a body sent
// with a Content-Encoding. An empty body is a body of its own, equal only to
// another empty one.
package fingerprint

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"

	"github.com/idemproxy/idemproxy/middleware"
)

// Readings of a body, as the fingerprint setting names them.
const (
	Bytes     = "bytes"     // the body's bytes (the core's own; Parse returns nil)
	JSON      = "json"      // RFC 8785
	Form      = "form"      // application/x-www-form-urlencoded
	Multipart = "multipart" // multipart/*, RFC 2046 and RFC 7578
)

// Bounds on the work one body may cost.
const (
	// MaxDepth is the deepest nesting of JSON arrays and objects read.
	MaxDepth = 64
	// MaxValues is the most values read in one body: JSON values (members
	// and elements included), form fields, multipart parts.
	MaxValues = 1 << 17
	// MaxIgnore is the most pointers a route may leave out.
	MaxIgnore = 64
	// maxPointerTokens bounds one ignored pointer.
	maxPointerTokens = MaxDepth
)

// Parse returns the reading named mode (Bytes, JSON, Form, Multipart) that
// leaves out the RFC 6901 pointers in ignore: any pointer into a JSON body; a
// field name ("/request_time") for a form or a multipart/form-data body. Bytes
// returns nil, the core's own reading, and takes no pointers.
func Parse(mode string, ignore []string) (middleware.BodyFingerprint, error) {
	if len(ignore) > MaxIgnore {
		return nil, fmt.Errorf("at most %d pointers may be left out, got %d", MaxIgnore, len(ignore))
	}
	switch mode {
	case Bytes, "":
		if len(ignore) > 0 {
			return nil, errors.New("the bytes reading leaves nothing out; use json, form or multipart")
		}
		return nil, nil
	case JSON:
		return NewJSON(ignore...)
	case Form:
		return NewForm(ignore...)
	case Multipart:
		return NewMultipart(ignore...)
	}
	return nil, fmt.Errorf("%q: want bytes, json, form or multipart", mode)
}

// encoded refuses a body sent with a Content-Encoding (gzip, …): a reading
// needs the body as it is meant, and a compressed one cannot be compared by its
// meaning without being decompressed, which is the upstream's work.
func encoded(r *http.Request, reading string) error {
	for _, ce := range r.Header.Values("Content-Encoding") {
		if v := strings.TrimSpace(ce); v != "" && !strings.EqualFold(v, "identity") {
			return fmt.Errorf("the body has a Content-Encoding; this route reads bodies as %s, which it needs unencoded", reading)
		}
	}
	return nil
}

// trie holds the ignored pointers: a leaf is left out with all below it.
type trie struct {
	kids map[string]*trie
	leaf bool
}

// child is the trie below token, or nil.
func (t *trie) child(token string) *trie {
	if t == nil {
		return nil
	}
	return t.kids[token]
}

// add adds the pointer p (RFC 6901: "" or "/token/…", ~0 and ~1 escapes).
func (t *trie) add(p string) error {
	tokens, err := parsePointer(p)
	if err != nil {
		return err
	}
	if len(tokens) == 0 {
		return errors.New(`"" would leave the whole body out; use fingerprint bytes with no body to compare instead`)
	}
	n := t
	for _, tok := range tokens {
		if n.kids == nil {
			n.kids = map[string]*trie{}
		}
		c := n.kids[tok]
		if c == nil {
			c = &trie{}
			n.kids[tok] = c
		}
		n = c
	}
	n.leaf = true
	return nil
}

// parsePointer splits an RFC 6901 pointer into its unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("%q is not a JSON pointer (RFC 6901): it must start with /", p)
	}
	raw := strings.Split(p[1:], "/")
	if len(raw) > maxPointerTokens {
		return nil, fmt.Errorf("%q has more than %d tokens", p, maxPointerTokens)
	}
	tokens := make([]string, len(raw))
	for i, tok := range raw {
		for j := 0; j < len(tok); j++ {
			if tok[j] == '~' && (j+1 == len(tok) || tok[j+1] != '0' && tok[j+1] != '1') {
				return nil, fmt.Errorf("%q has a ~ that is not ~0 or ~1", p)
			}
		}
		tokens[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
	}
	return tokens, nil
}

// escapeToken escapes a member name as a pointer token.
func escapeToken(name string) string {
	if !strings.ContainsAny(name, "~/") {
		return name
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

// fieldTrie builds the ignored names of a form or multipart body: pointers of
// one token each.
func fieldTrie(kind string, ignore []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, p := range ignore {
		tokens, err := parsePointer(p)
		if err != nil {
			return nil, err
		}
		if len(tokens) != 1 {
			return nil, fmt.Errorf("%q: a %s body's fields have no members; write /name", p, kind)
		}
		out[tokens[0]] = true
	}
	return out, nil
}

// sink writes canonical text into a hash, through a buffer; with no hash it
// keeps all of it (CanonicalJSON).
type sink struct {
	buf []byte
	h   hash.Hash
}

const sinkFlush = 32 << 10

func (s *sink) flushIfFull() {
	if s.h != nil && len(s.buf) >= sinkFlush {
		_, _ = s.h.Write(s.buf)
		s.buf = s.buf[:0]
	}
}

// sum returns the SHA-256 of all written since the last sum, and starts anew.
func (s *sink) sum() (out [sha256.Size]byte) {
	_, _ = s.h.Write(s.buf)
	s.buf = s.buf[:0]
	s.h.Sum(out[:0])
	s.h.Reset()
	return out
}

// rest writes what r reads, as the last field of a sum (so unprefixed), without
// holding it.
func (s *sink) rest(r io.Reader) error {
	_, _ = s.h.Write(s.buf)
	s.buf = s.buf[:0]
	_, err := io.Copy(s.h, r)
	return err
}

// field writes b length-prefixed, so that fields' boundaries are unambiguous.
func (s *sink) field(b []byte) {
	s.length(len(b))
	if s.h != nil && len(b) >= sinkFlush {
		_, _ = s.h.Write(s.buf)
		_, _ = s.h.Write(b)
		s.buf = s.buf[:0]
		return
	}
	s.buf = append(s.buf, b...)
	s.flushIfFull()
}

// fieldString is field for a short string.
func (s *sink) fieldString(v string) {
	s.length(len(v))
	s.buf = append(s.buf, v...)
	s.flushIfFull()
}

func (s *sink) length(l int) {
	n := uint64(l)
	s.buf = append(s.buf, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}
