package fingerprint

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemproxy/idemproxy/internal/fold"
)

// Names that an upstream reads as one. A JSON object whose member names fold
// alike (fold.Rune: as Go's encoding/json matches a struct field, or .NET and
// Java ignore case) is refused, as a name twice is. A form's fields whose names
// some upstream reads as one variable keep the order they came in.

// foldSeed keys the hashes that find names folding alike: a client cannot
// choose names whose hashes collide.
var foldSeed = maphash.MakeSeed()

// foldEntry is a member's folded name's hash.
type foldEntry struct {
	h uint64
	k int32
}

// foldedTwice returns two members of an object whose names fold alike, if
// any: a few compared pairwise, more hashed folded, sorted by hash, and equal
// hashes compared.
func (d *doc) foldedTwice(members []int32) (int32, int32, bool) {
	if len(members) <= 8 {
		for i, y := range members {
			for _, x := range members[:i] {
				if fold.Equal(d.nameBytes(x), d.nameBytes(y)) {
					return x, y, true // members are sorted: x first
				}
			}
		}
		return 0, 0, false
	}
	d.folds = d.folds[:0]
	for _, k := range members {
		d.tmp = fold.Append(d.tmp[:0], d.nameBytes(k))
		d.folds = append(d.folds, foldEntry{maphash.Bytes(foldSeed, d.tmp), k})
	}
	slices.SortFunc(d.folds, func(x, y foldEntry) int { return cmp.Compare(x.h, y.h) })
	for i := 1; i < len(d.folds); i++ {
		for j := i - 1; j >= 0 && d.folds[j].h == d.folds[i].h; j-- {
			if x, y := d.folds[j].k, d.folds[i].k; fold.Equal(d.nameBytes(x), d.nameBytes(y)) {
				if compareUTF16(d.nameBytes(x), d.nameBytes(y)) > 0 {
					x, y = y, x
				}
				return x, y, true
			}
		}
	}
	return 0, 0, false
}

// foldedError is the refusal of an object with the members x and y.
func (d *doc) foldedError(x, y int32) error {
	return d.fail("has the member names " + quoteName(d.nameBytes(x)) + " and " + quoteName(d.nameBytes(y)) +
		", which differ only in case: readers that ignore case (Go's encoding/json into a struct, .NET, Java) take them for one")
}

// quoteName quotes a name, cut to 40 bytes.
func quoteName(b []byte) string {
	if len(b) <= 40 {
		return strconv.Quote(string(b))
	}
	n := 40
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return strconv.Quote(string(b[:n])) + "…"
}

// orderPart names the form part that covers the order of fields whose names an
// upstream reads as one.
const orderPart = "the order of form fields read as one name"

// formReadings are the ways upstreams read a form field's name as a variable
// that other names share; each appends the variable's key to dst, and ok is
// false for a name the reading drops.
var formReadings = [...]func(dst []byte, name string) (key []byte, ok bool){phpName, pathName}

// phpName is the variable PHP's php_register_variable_ex reads: leading spaces
// dropped, the name cut at a NUL, then up to the first "[" that a "]" closes
// later, with " " and "." as "_" (all of the name, "[" included, when no "]"
// closes it). PHP reads a[x], a[x]junk and a[] as parts of a, and drops a name
// whose variable is empty.
func phpName(dst []byte, name string) ([]byte, bool) {
	name = strings.TrimLeft(name, " ")
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	end, closed := len(name), false
	if i := strings.IndexByte(name, '['); i >= 0 && strings.IndexByte(name[i+1:], ']') >= 0 {
		end, closed = i, true
	}
	if end == 0 {
		return dst, false
	}
	for j := range end {
		c := name[j]
		if c == ' ' || c == '.' || c == '[' && !closed {
			c = '_'
		}
		dst = append(dst, c)
	}
	return dst, true
}

// pathName is the variable of readers that nest names by brackets and dots
// (Rack, qs, ASP.NET Core's model binding, Spring) and ignore case (ASP.NET
// Core, gorilla/schema): the first word, folded, of the name up to its first
// "[" past the start (Rack's top-level name), words split at "[", "]" and
// ".". A name with no word there has the empty key. Readers that decode names
// as UTF-8 read what is not UTF-8 as U+FFFD, one or one per byte: a run of
// such bytes and U+FFFD is one U+FFFD here.
func pathName(dst []byte, name string) ([]byte, bool) {
	top := name
	if len(name) > 1 {
		if i := strings.IndexByte(name[1:], '['); i >= 0 {
			top = name[:1+i]
		}
	}
	sep := func(c byte) bool { return c == '[' || c == ']' || c == '.' }
	i := 0
	for i < len(top) && sep(top[i]) {
		i++
	}
	j := i
	for j < len(top) && !sep(top[j]) {
		j++
	}
	return appendFoldedText(dst, top[i:j]), true
}

// appendFoldedText appends s folded, each run of bytes that are not UTF-8 and
// of U+FFFD as one U+FFFD.
func appendFoldedText(dst []byte, s string) []byte {
	bad := false
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError {
			if !bad {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			}
			bad = true
		} else {
			dst = fold.Append(dst, s[:n])
			bad = false
		}
		s = s[n:]
	}
	return dst
}

// simpleName reports whether every reading keeps name as it is (up to case):
// no " ", ".", "[", "]" or NUL, no capital, nothing beyond ASCII. Different
// simple names are different variables to every reading.
func simpleName(name string) bool {
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == ' ' || c == '.' || c == '[' || c == ']' || c == 0, c >= utf8.RuneSelf, 'A' <= c && c <= 'Z':
			return false
		}
	}
	return true
}

// formOrder writes into s, for each reading, the names in the order sent of
// every variable read from more than one distinct name (ignored fields by
// name, their values never); it reports whether there was any. fields are in
// the order sent.
func formOrder(s *sink, fields []formField) bool {
	if !slices.ContainsFunc(fields, func(f formField) bool { return !simpleName(f.name) }) {
		return false
	}
	type keyed struct{ a, b, field int32 }
	size := 0
	for _, f := range fields {
		size += len(f.name)
	}
	buf := make([]byte, 0, size+size/4)
	keys := make([]keyed, 0, len(fields))
	found := false
	for r, read := range formReadings {
		buf, keys = buf[:0], keys[:0]
		for i, f := range fields {
			a := len(buf)
			var ok bool
			if buf, ok = read(buf, f.name); ok {
				keys = append(keys, keyed{int32(a), int32(len(buf)), int32(i)})
			} else {
				buf = buf[:a]
			}
		}
		slices.SortFunc(keys, func(x, y keyed) int { // by key, then in the order sent
			if c := bytes.Compare(buf[x.a:x.b], buf[y.a:y.b]); c != 0 {
				return c
			}
			return cmp.Compare(x.field, y.field)
		})
		for i := 0; i < len(keys); {
			j, distinct := i+1, false
			for ; j < len(keys) && bytes.Equal(buf[keys[j].a:keys[j].b], buf[keys[i].a:keys[i].b]); j++ {
				distinct = distinct || fields[keys[j].field].name != fields[keys[i].field].name
			}
			if distinct {
				found = true
				s.field([]byte{byte(r)})
				s.field(buf[keys[i].a:keys[i].b])
				s.field([]byte(strconv.Itoa(j - i)))
				for _, k := range keys[i:j] {
					s.fieldString(fields[k.field].name)
				}
			}
			i = j
		}
	}
	return found
}
