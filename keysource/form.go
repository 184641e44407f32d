package keysource

import (
	"bytes"
	"errors"

	"github.com/idemproxy/idemproxy/middleware"
)

var (
	errKeyFieldTwo   = errors.New("the key field appears more than once")
	errFormSemicolon = errors.New(`the form body contains ";", which Go refuses as a separator and other parsers take as one: the key would be ambiguous`)
)

// formKey returns the value of the field named field in the form-encoded
// (application/x-www-form-urlencoded) body, in one pass over it that allocates
// nothing but the key: names are percent- and plus-decoded only to compare
// them, and only the key's value is decoded.
//
// On every body url.ParseQuery accepts, the answer is what ParseQuery finds:
// no such field is middleware.ErrNoKey, one is its value (checked by checkBodyKey), more
// than one errKeyFieldTwo. A raw ";" anywhere is errFormSemicolon (Go refuses
// the body, other parsers split fields on it); an invalid percent escape
// anywhere is middleware.ErrNoKey, as before. Unlike ParseQuery, the number of fields is
// not limited: none is kept.
func formKey(body []byte, field string) (string, error) {
	if bytes.IndexByte(body, ';') >= 0 {
		return "", errFormSemicolon
	}
	var value []byte
	found, twice := false, false
	for rest := body; len(rest) > 0; {
		var pair []byte
		pair, rest, _ = bytes.Cut(rest, []byte{'&'})
		if len(pair) == 0 {
			continue
		}
		name, val, _ := bytes.Cut(pair, []byte{'='})
		if !validEscapes(name) || !validEscapes(val) {
			return "", middleware.ErrNoKey
		}
		if formNameIs(name, field) {
			twice = found
			found, value = true, val
		}
	}
	switch {
	case twice:
		return "", errKeyFieldTwo
	case !found:
		return "", middleware.ErrNoKey
	}
	var buf [middleware.MaxKeyLength + 1]byte
	w := 0
	for i := 0; i < len(value); w++ {
		if w > middleware.MaxKeyLength {
			return "", errKeyLong
		}
		buf[w], i = formByte(value, i)
	}
	key := string(buf[:w])
	return key, checkBodyKey(key)
}

// validEscapes reports whether every % in s starts a two-digit hex escape.
func validEscapes(s []byte) bool {
	for i := bytes.IndexByte(s, '%'); i >= 0; {
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return false
		}
		j := bytes.IndexByte(s[i+3:], '%')
		if j < 0 {
			break
		}
		i += 3 + j
	}
	return true
}

// formByte decodes the byte at s[i] of a form name or value (escapes already
// checked): %XX its byte, + a space.
func formByte(s []byte, i int) (byte, int) {
	switch s[i] {
	case '%':
		return byte(hexVal(s[i+1])<<4 | hexVal(s[i+2])), i + 3
	case '+':
		return ' ', i + 1
	}
	return s[i], i + 1
}

// formNameIs reports whether the raw form name s decodes to field.
func formNameIs(s []byte, field string) bool {
	j := 0
	for i := 0; i < len(s); j++ {
		var c byte
		c, i = formByte(s, i)
		if j >= len(field) || field[j] != c {
			return false
		}
	}
	return j == len(field)
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
