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

	"github.com/idemproxy/idemproxy/internal/fold"
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
func (j *JSONBody) Parts(r *http.Request, body []byte, part func(string, [sha256.Size]byte)) error {
	if err := encoded(r, "JSON"); err != nil {
		return err
	}
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

// CanonicalJSON returns text in RFC 8785 canonical form, leaving out nothing. It
// fails as the JSON reading does (see the package documentation).
func CanonicalJSON(text []byte) ([]byte, error) {
	d := &doc{}
	root, err := d.parse(text)
	if err != nil || root < 0 {
		if err == nil {
			err = errorAt("is empty", nil)
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
	path  []seg  // the tokens to the value being read, for errors
	tmp   []byte // one decoded string
	folds []foldEntry
	out   sink
}

var docs = sync.Pool{New: func() any { return &doc{out: sink{h: sha256.New()}} }}

func getDoc() *doc { return docs.Get().(*doc) }

func putDoc(d *doc) {
	if cap(d.nodes) > 1<<16 || cap(d.names) > 1<<16 || cap(d.out.buf) > 2*sinkFlush {
		return // do not keep a large document's memory pooled
	}
	if cap(d.tmp) > 1<<16 {
		d.tmp = nil
	}
	if cap(d.folds) > 1<<12 {
		d.folds = nil
	}
	d.body, d.nodes, d.kids, d.names, d.stack, d.path = nil, d.nodes[:0], d.kids[:0], d.names[:0], d.stack[:0], d.path[:0]
	d.out.buf = d.out.buf[:0]
	d.out.h.Reset()
	docs.Put(d)
}

func (d *doc) name(k int32) string { n := d.nodes[k]; return string(d.names[n.na:n.nb]) }

// seg is a token of the path to the value being read: a member's name
// (names[na:nb]) or an element's index (idx >= 0).
type seg struct{ na, nb, idx int32 }

// tokens spells the path being read.
func (d *doc) tokens() []string {
	out := make([]string, len(d.path))
	for i, s := range d.path {
		if s.idx >= 0 {
			out[i] = strconv.Itoa(int(s.idx))
		} else {
			out[i] = string(d.names[s.na:s.nb])
		}
	}
	return out
}

// fail is errorAt the value being read.
func (d *doc) fail(msg string) error { return errorAt(msg, d.tokens()) }

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
		return 0, i, d.fail("ends early")
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		if depth == MaxDepth {
			return 0, i, d.fail(fmt.Sprintf("is nested deeper than %d levels", MaxDepth))
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
	return 0, i, d.fail("has a value that is not JSON")
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
	plain := true // every member name is fold.Plain
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == closer {
		i++
	} else {
		for n := 0; ; n++ {
			var na, nb int
			if object {
				if i >= len(b) || b[i] != '"' {
					return 0, i, d.fail("has a member without a quoted name")
				}
				end, err := d.scanString(i)
				if err != nil {
					return 0, i, err
				}
				na = len(d.names)
				d.names = appendUnescaped(d.names, b[i+1:end-1])
				nb = len(d.names)
				plain = plain && fold.Plain(d.names[na:nb])
				d.path = append(d.path, seg{na: int32(na), nb: int32(nb), idx: -1})
				if i = skipWS(b, end); i >= len(b) || b[i] != ':' {
					return 0, i, d.fail("has a member without a ':'")
				}
				i = skipWS(b, i+1)
			} else {
				d.path = append(d.path, seg{idx: int32(n)})
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
			return 0, i, d.fail("has a container that is not closed")
		}
	}
	members := d.stack[mark:]
	if object {
		slices.SortFunc(members, func(x, y int32) int { return compareUTF16(d.nameBytes(x), d.nameBytes(y)) })
		for j := 1; j < len(members); j++ {
			if string(d.nameBytes(members[j])) == string(d.nameBytes(members[j-1])) {
				return 0, i, errorAt("has a member name twice (parsers disagree on which one counts)",
					append(d.tokens(), string(d.nameBytes(members[j]))))
			}
		}
		if !plain {
			if x, y, twice := d.foldedTwice(members); twice {
				return 0, i, d.foldedError(x, y)
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
