package fingerprint

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// compareUTF16 orders two UTF-8 strings by their UTF-16 code units (RFC 8785
// §3.2.3): as code points, but for those above U+FFFF, whose surrogates sort
// below U+E000–U+FFFF.
func compareUTF16(x, y []byte) int {
	// Skip the common prefix a word at a time (hostile documents have many
	// long names that differ late), then back up to the start of its rune.
	i, n := 0, min(len(x), len(y))
	for i+8 <= n && string(x[i:i+8]) == string(y[i:i+8]) {
		i += 8
	}
	for i < n && x[i] == y[i] {
		i++
	}
	for i > 0 && i < n && x[i]&0xC0 == 0x80 {
		i--
	}
	x, y = x[i:], y[i:]
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
			return 0, d.fail("has a control character in a string")
		case c == '\\':
			if j+1 >= len(b) {
				return 0, d.fail("ends early")
			}
			if b[j+1] != 'u' {
				if !strings.ContainsRune(`"\/bfnrt`, rune(b[j+1])) {
					return 0, d.fail("has an invalid escape in a string")
				}
				j += 2
				continue
			}
			r, ok := hex4(b, j+2)
			if !ok {
				return 0, d.fail("has an invalid \\u escape")
			}
			j += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if r < 0xDC00 && j+1 < len(b) && b[j] == '\\' && b[j+1] == 'u' {
					r2, ok = hex4(b, j+2)
				}
				if !ok || utf16.DecodeRune(r, r2) == utf8.RuneError {
					return 0, d.fail("has a lone surrogate in a string (not I-JSON, RFC 7493)")
				}
				j += 6
			}
		case c < utf8.RuneSelf:
			j++
		default:
			r, n := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && n <= 1 {
				return 0, d.fail("has invalid UTF-8")
			}
			j += n
		}
	}
	return 0, d.fail("ends early")
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
