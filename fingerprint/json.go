package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// JSONBody is the JSON reading (RFC 8785). Build it with NewJSON.
type JSONBody struct {
	ignore *trie
}

// NewJSON returns the JSON reading that leaves out the RFC 6901 pointers in
// ignore: an object member there is left out (present or not, the document is
// the same); an array element there is compared as a placeholder, so the
// array's length still counts.
func NewJSON(ignore ...string) (*JSONBody, error) {
	j := &JSONBody{ignore: &trie{}}
	for _, p := range ignore {
		if err := j.ignore.add(p); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// ID implements middleware.BodyFingerprint.
func (*JSONBody) ID() string { return JSON }

// Parts implements middleware.BodyFingerprint: the first part, named "", is
// the document's shape ("{", "[", or a scalar root in full; an empty body is
// its own shape); then each top-level member, named by its pointer ("/amount"),
// in canonical order, or each element ("/0"), with the SHA-256 of its
// canonical form.
func (j *JSONBody) Parts(_ *http.Request, body []byte, part func(string, [sha256.Size]byte)) error {
	d := getDoc()
	defer putDoc(d)
	root, err := d.parse(body)
	if err != nil {
		return err
	}
	s := &d.out
	if root < 0 {
		part("", s.sum()) // an empty body
		return nil
	}
	n := d.nodes[root]
	switch n.kind {
	case kObject:
		s.buf = append(s.buf, '{')
		part("", s.sum())
		for _, k := range d.kids[n.a:n.b] {
			name := d.name(k)
			t := j.ignore.child(name)
			if t != nil && t.leaf {
				continue
			}
			d.emit(s, k, t)
			part("/"+escapeToken(name), s.sum())
		}
	case kArray:
		s.buf = append(s.buf, '[')
		part("", s.sum())
		for i, k := range d.kids[n.a:n.b] {
			tok := strconv.Itoa(i)
			if t := j.ignore.child(tok); t == nil || !t.leaf {
				d.emit(s, k, t)
			}
			part("/"+tok, s.sum())
		}
	default:
		d.emit(s, root, nil)
		part("", s.sum())
	}
	return nil
}

// CanonicalJSON returns doc in RFC 8785 canonical form, leaving out nothing. It
// fails as the JSON reading does (see the package documentation).
func CanonicalJSON(text []byte) ([]byte, error) {
	d := &doc{}
	root, err := d.parse(text)
	if err != nil || root < 0 {
		if err == nil {
			err = errorAt("the body is empty", nil)
		}
		return nil, err
	}
	d.emit(&d.out, root, nil)
	return d.out.buf, nil
}

type kind uint8

const (
	kObject kind = iota + 1
	kArray
	kString
	kNumber
	kTrue
	kFalse
	kNull
)

// node is one value. A scalar is the text body[a:b] (a string's content
// between its quotes, escapes kept; a number as written); a container's
// children are kids[a:b] (an object's sorted by name). A member's name is
// names[na:nb], decoded.
type node struct {
	kind   kind
	a, b   int32
	na, nb int32
}

// doc is a parsed body: pooled, its slices reused.
type doc struct {
	body  []byte
	nodes []node
	kids  []int32
	names []byte
	stack []int32
	path  []string // the tokens to the value being read, for errors
	tmp   []byte   // one decoded string
	out   sink
}

var docs = sync.Pool{New: func() any { return &doc{out: sink{h: sha256.New()}} }}

func getDoc() *doc { return docs.Get().(*doc) }

func putDoc(d *doc) {
	if cap(d.nodes) > 1<<14 || cap(d.names) > 1<<16 || cap(d.out.buf) > 2*sinkFlush {
		return // do not keep a large document's memory pooled
	}
	if cap(d.tmp) > 1<<16 {
		d.tmp = nil
	}
	d.body, d.nodes, d.kids, d.names, d.stack, d.path = nil, d.nodes[:0], d.kids[:0], d.names[:0], d.stack[:0], d.path[:0]
	d.out.buf = d.out.buf[:0]
	d.out.h.Reset()
	docs.Put(d)
}

func (d *doc) name(k int32) string { n := d.nodes[k]; return string(d.names[n.na:n.nb]) }

// jsonError is a JSON reading's refusal, with where it happened.
type jsonError struct{ msg string }

func (e *jsonError) Error() string { return e.msg }

func errorAt(msg string, path []string) error {
	if len(path) == 0 {
		return &jsonError{"the JSON body " + msg}
	}
	var b strings.Builder
	for _, t := range path {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	p := b.String()
	if len(p) > 200 {
		p = p[:200] + "…"
	}
	return &jsonError{fmt.Sprintf("the JSON body at %s %s", strconv.Quote(p), msg)}
}

// parse reads body into d; root is -1 for a body of whitespace only.
func (d *doc) parse(body []byte) (root int32, err error) {
	if len(body) > math.MaxInt32 {
		return 0, errorAt("is too large to read", nil)
	}
	d.body = body
	i := skipWS(body, 0)
	if i == len(body) {
		return -1, nil
	}
	root, i, err = d.value(i, 0)
	if err != nil {
		return 0, err
	}
	if skipWS(body, i) != len(body) {
		return 0, errorAt("has text after its value", nil)
	}
	return root, nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func (d *doc) add(n node) (int32, error) {
	if len(d.nodes) >= MaxValues {
		return 0, errorAt(fmt.Sprintf("has more than %d values", MaxValues), nil)
	}
	d.nodes = append(d.nodes, n)
	return int32(len(d.nodes) - 1), nil
}

// value reads the value at body[i] (not whitespace); it returns its node and
// the index after it.
func (d *doc) value(i, depth int) (int32, int, error) {
	b := d.body
	if i >= len(b) {
		return 0, i, errorAt("ends early", d.path)
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		if depth == MaxDepth {
			return 0, i, errorAt(fmt.Sprintf("is nested deeper than %d levels", MaxDepth), d.path)
		}
		return d.container(i, depth+1)
	case c == '"':
		end, err := d.scanString(i)
		if err != nil {
			return 0, i, err
		}
		k, err := d.add(node{kind: kString, a: int32(i + 1), b: int32(end - 1)})
		return k, end, err
	case c == '-' || c >= '0' && c <= '9':
		end, err := d.scanNumber(i)
		if err != nil {
			return 0, i, err
		}
		k, err := d.add(node{kind: kNumber, a: int32(i), b: int32(end)})
		return k, end, err
	}
	for _, lit := range [...]struct {
		text string
		kind kind
	}{{"true", kTrue}, {"false", kFalse}, {"null", kNull}} {
		if bytes.HasPrefix(b[i:], []byte(lit.text)) {
			k, err := d.add(node{kind: lit.kind})
			return k, i + len(lit.text), err
		}
	}
	return 0, i, errorAt("has a value that is not JSON", d.path)
}

// container reads the object or array at body[i].
func (d *doc) container(i, depth int) (int32, int, error) {
	b := d.body
	object := b[i] == '{'
	k, err := d.add(node{kind: kArray})
	if err != nil {
		return 0, i, err
	}
	if object {
		d.nodes[k].kind = kObject
	}
	mark := len(d.stack)
	closer := byte(']')
	if object {
		closer = '}'
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == closer {
		i++
	} else {
		for n := 0; ; n++ {
			var na, nb int
			if object {
				if i >= len(b) || b[i] != '"' {
					return 0, i, errorAt("has a member without a quoted name", d.path)
				}
				end, err := d.scanString(i)
				if err != nil {
					return 0, i, err
				}
				na = len(d.names)
				d.names = appendUnescaped(d.names, b[i+1:end-1])
				nb = len(d.names)
				d.path = append(d.path, string(d.names[na:nb]))
				if i = skipWS(b, end); i >= len(b) || b[i] != ':' {
					return 0, i, errorAt("has a member without a ':'", d.path)
				}
				i = skipWS(b, i+1)
			} else {
				d.path = append(d.path, strconv.Itoa(n))
			}
			kid, next, err := d.value(i, depth)
			if err != nil {
				return 0, next, err
			}
			d.path = d.path[:len(d.path)-1]
			d.nodes[kid].na, d.nodes[kid].nb = int32(na), int32(nb)
			d.stack = append(d.stack, kid)
			if i = skipWS(b, next); i < len(b) && b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if i < len(b) && b[i] == closer {
				i++
				break
			}
			return 0, i, errorAt("has a container that is not closed", d.path)
		}
	}
	members := d.stack[mark:]
	if object {
		slices.SortFunc(members, func(x, y int32) int { return compareUTF16(d.nameBytes(x), d.nameBytes(y)) })
		for j := 1; j < len(members); j++ {
			if string(d.nameBytes(members[j])) == string(d.nameBytes(members[j-1])) {
				return 0, i, errorAt("has a member name twice (parsers disagree on which one counts)",
					append(d.path, string(d.nameBytes(members[j]))))
			}
		}
	}
	d.nodes[k].a = int32(len(d.kids))
	d.kids = append(d.kids, members...)
	d.nodes[k].b = int32(len(d.kids))
	d.stack = d.stack[:mark]
	return k, i, nil
}

func (d *doc) nameBytes(k int32) []byte { n := d.nodes[k]; return d.names[n.na:n.nb] }

// compareUTF16 orders two UTF-8 strings by their UTF-16 code units (RFC 8785
// §3.2.3): as code points, but for those above U+FFFF, whose surrogates sort
// below U+E000–U+FFFF.
func compareUTF16(x, y []byte) int {
	for len(x) > 0 && len(y) > 0 {
		rx, nx := utf8.DecodeRune(x)
		ry, ny := utf8.DecodeRune(y)
		if rx != ry {
			return utf16Key(rx) - utf16Key(ry)
		}
		x, y = x[nx:], y[ny:]
	}
	return len(x) - len(y)
}

// utf16Key is the rune's first UTF-16 code unit, scaled so that runes that
// share it (a high surrogate) still order by their second.
func utf16Key(r rune) int {
	if r < 0x10000 {
		return int(r) << 10
	}
	hi, lo := utf16.EncodeRune(r)
	return int(hi)<<10 | int(lo-0xDC00)
}

// scanString checks the string at body[i] (its opening quote): valid UTF-8,
// no control character, valid escapes, surrogates in pairs (I-JSON, RFC 7493).
// It returns the index after its closing quote.
func (d *doc) scanString(i int) (int, error) {
	b := d.body
	for j := i + 1; j < len(b); {
		c := b[j]
		switch {
		case c == '"':
			return j + 1, nil
		case c < 0x20:
			return 0, errorAt("has a control character in a string", d.path)
		case c == '\\':
			if j+1 >= len(b) {
				return 0, errorAt("ends early", d.path)
			}
			if b[j+1] != 'u' {
				if !strings.ContainsRune(`"\/bfnrt`, rune(b[j+1])) {
					return 0, errorAt("has an invalid escape in a string", d.path)
				}
				j += 2
				continue
			}
			r, ok := hex4(b, j+2)
			if !ok {
				return 0, errorAt("has an invalid \\u escape", d.path)
			}
			j += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if r < 0xDC00 && j+1 < len(b) && b[j] == '\\' && b[j+1] == 'u' {
					r2, ok = hex4(b, j+2)
				}
				if !ok || utf16.DecodeRune(r, r2) == utf8.RuneError {
					return 0, errorAt("has a lone surrogate in a string (not I-JSON, RFC 7493)", d.path)
				}
				j += 6
			}
		case c < utf8.RuneSelf:
			j++
		default:
			r, n := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && n <= 1 {
				return 0, errorAt("has invalid UTF-8", d.path)
			}
			j += n
		}
	}
	return 0, errorAt("ends early", d.path)
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendUnescaped appends the decoded content of a string scanString accepted.
func appendUnescaped(dst, raw []byte) []byte {
	for j := 0; j < len(raw); {
		c := raw[j]
		if c != '\\' {
			dst = append(dst, c)
			j++
			continue
		}
		if raw[j+1] != 'u' {
			dst = append(dst, unescape(raw[j+1]))
			j += 2
			continue
		}
		r, _ := hex4(raw, j+2)
		j += 6
		if utf16.IsSurrogate(r) {
			r2, _ := hex4(raw, j+2)
			r = utf16.DecodeRune(r, r2)
			j += 6
		}
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// unescape is the byte a one-character escape stands for.
func unescape(c byte) byte {
	switch c {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return c // " \ /
}
