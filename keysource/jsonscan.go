package keysource

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/idemproxy/idemproxy/internal/fold"
	"github.com/idemproxy/idemproxy/middleware"
)

// The JSON scanner's lexical pieces: whitespace, strings, numbers, and the
// decoding and comparing of the member names and the key it finds, without
// allocating but for the key.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index after the JSON string that starts at b[i] (a
// quote), and whether it is one: no control characters, valid escapes. Bytes
// that are not UTF-8 are allowed, as encoding/json allows them.
func scanString(b []byte, i int) (int, bool) {
	for i++; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		default:
			i++
		}
	}
	return i, false
}

// scanNumber returns the index after the JSON number at b[i], and whether it is
// one: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, bool) {
	digits := func(i int) (int, bool) {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i, i > start
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i, _ = digits(i)
	default:
		return i, false
	}
	var ok bool
	if i < len(b) && b[i] == '.' {
		if i, ok = digits(i + 1); !ok {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, ok = digits(i); !ok {
			return i, false
		}
	}
	return i, true
}

func hexVal(c byte) rune {
	switch {
	case c >= 'a':
		return rune(c-'a') + 10
	case c >= 'A':
		return rune(c-'A') + 10
	}
	return rune(c - '0')
}

// nextRune decodes the rune at s[i] of a JSON string's content (between its
// quotes, already scanned) as encoding/json decodes it, and returns the index
// after it: a lone or mismatched surrogate escape and every byte that is not
// UTF-8 become U+FFFD.
func nextRune(s []byte, i int) (rune, int) {
	c := s[i]
	if c == '\\' {
		switch e := s[i+1]; e {
		case 'u':
			r := hexVal(s[i+2])<<12 | hexVal(s[i+3])<<8 | hexVal(s[i+4])<<4 | hexVal(s[i+5])
			i += 6
			if !utf16.IsSurrogate(r) {
				return r, i
			}
			if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
				r2 := hexVal(s[i+2])<<12 | hexVal(s[i+3])<<8 | hexVal(s[i+4])<<4 | hexVal(s[i+5])
				if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
					return d, i + 6
				}
			}
			return unicode.ReplacementChar, i
		case 'b':
			return '\b', i + 2
		case 'f':
			return '\f', i + 2
		case 'n':
			return '\n', i + 2
		case 'r':
			return '\r', i + 2
		case 't':
			return '\t', i + 2
		default: // " \ /
			return rune(e), i + 2
		}
	}
	if c < utf8.RuneSelf {
		return rune(c), i + 1
	}
	r, size := utf8.DecodeRune(s[i:])
	return r, i + size
}

// decodeKey decodes a JSON string's content as the key: at most middleware.MaxKeyLength
// bytes are decoded, a longer string is errKeyLong whatever follows.
func decodeKey(s []byte) (string, error) {
	var buf [middleware.MaxKeyLength + utf8.UTFMax]byte
	w := 0
	for i := 0; i < len(s); {
		var r rune
		r, i = nextRune(s, i)
		w += utf8.EncodeRune(buf[w:], r)
		if w > middleware.MaxKeyLength {
			return "", errKeyLong
		}
	}
	key := string(buf[:w])
	return key, checkBodyKey(key)
}

// compareName compares a JSON member name's content (between its quotes) with
// tok: exactly, as a Go map decode does, and as a case-insensitive reader
// matches a field's name (fold.Rune: a Go struct decode's bytes.EqualFold, and
// .NET's and Java's ways of ignoring case).
func compareName(s []byte, tok string) (exact, folded bool) {
	exact = true
	j := 0
	for i := 0; i < len(s); {
		if j >= len(tok) {
			return false, false
		}
		var r rune
		r, i = nextRune(s, i)
		var enc [utf8.UTFMax]byte
		m := utf8.EncodeRune(enc[:], r)
		if exact && (j+m > len(tok) || string(enc[:m]) != tok[j:j+m]) {
			exact = false
		}
		tr, size := utf8.DecodeRuneInString(tok[j:])
		if r != tr && fold.Rune(r) != fold.Rune(tr) {
			return false, false
		}
		j += size
	}
	if j != len(tok) {
		return false, false
	}
	return exact, true
}
