// Package fold is the one rule by which idemproxy decides that two member or
// field names may be read as one name by an upstream that ignores case: the
// JSON key source (keysource) and the canonical fingerprints (fingerprint)
// both compare names with it.
//
// Two runes fold alike when any of these readers takes them as equal, closed
// transitively:
//
//   - Go's encoding/json matching a member to a struct field (its foldName,
//     bytes.EqualFold: each rune by its Unicode simple case folding orbit, so
//     the Kelvin sign K is a k and the long s ſ an s);
//   - .NET's OrdinalIgnoreCase (System.Text.Json's PropertyNameCaseInsensitive,
//     ASP.NET Core's form and query keys): each character by its upper case,
//     so ı (dotless i) is an I;
//   - Java's String.equalsIgnoreCase: by upper case, then by the lower case of
//     that, so İ (capital I with a dot) is an i.
//
// The only runes this merges beyond Go's own orbits are ı and İ (into the orbit
// of I); a test checks that over every rune. It is simple folding, rune for
// rune: ß is not ss, as none of those readers takes it so.
package fold

import (
	"unicode"
	"unicode/utf8"
)

// Rune returns the representative of r's class: the smallest rune of the
// simple case folding orbit of the lower case of r's upper case. An ASCII
// letter's is its capital, as in encoding/json's foldName.
func Rune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' {
			r -= 'a' - 'A'
		}
		return r
	}
	r = unicode.ToLower(unicode.ToUpper(r))
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// Append appends name with each rune replaced by its representative: two
// names fold alike exactly when their Append forms are equal. Bytes that are
// not UTF-8 are kept as they are.
func Append[S ~string | ~[]byte](dst []byte, name S) []byte {
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := decode(name[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, c)
		} else {
			dst = utf8.AppendRune(dst, Rune(r))
		}
		i += n
	}
	return dst
}

// Equal reports whether a and b fold alike (their Append forms are equal),
// without building them.
func Equal[S ~string | ~[]byte](a, b S) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ra, na := decode(a[i:])
		rb, nb := decode(b[j:])
		switch {
		case ra == utf8.RuneError && na == 1 || rb == utf8.RuneError && nb == 1:
			if na != 1 || nb != 1 || a[i] != b[j] {
				return false
			}
		case ra != rb && Rune(ra) != Rune(rb):
			return false
		}
		i, j = i+na, j+nb
	}
	return i == len(a) && j == len(b)
}

// decode is utf8.DecodeRuneInString for a string or a byte slice.
func decode[S ~string | ~[]byte](s S) (rune, int) {
	if s[0] < utf8.RuneSelf {
		return rune(s[0]), 1
	}
	return utf8.DecodeRuneInString(string(s[:min(len(s), utf8.UTFMax)]))
}

// Plain reports whether name folds only to itself among plain names: it has no
// capital ASCII letter and no byte beyond ASCII. Two different plain names
// never fold alike, so a set of names all plain needs no folding to compare.
func Plain(name []byte) bool {
	for _, c := range name {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}
