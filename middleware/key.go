package middleware

import (
	"errors"
	"strings"
)

// MaxKeyLength is the longest key accepted, in characters.
const MaxKeyLength = 255

// Key parsing errors; their text is the detail of the 400 problem.
var (
	errKeyMany   = errors.New("the Idempotency-Key header must appear exactly once")
	errKeyEmpty  = errors.New("the idempotency key is empty")
	errKeyLong   = errors.New("the idempotency key is longer than 255 characters")
	errKeyChars  = errors.New("the idempotency key must be visible ASCII characters, without commas outside a quoted string")
	errKeyQuoted = errors.New("the idempotency key is a malformed quoted string (RFC 8941 sf-string)")
)

// ParseKey extracts the key from the values of the key header. It accepts exactly
// one value, either an RFC 8941 sf-string ("…", with \" and \\ escapes, printable
// ASCII inside) or a bare value of visible ASCII characters without commas, and
// returns 1–255 characters.
func ParseKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", errKeyMany
	}
	v := values[0]
	if v == "" {
		return "", errKeyEmpty
	}
	if v[0] == '"' {
		return parseSFString(v)
	}
	if len(v) > MaxKeyLength {
		return "", errKeyLong
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c > 0x7e || c == ',' {
			if c == ',' {
				return "", errKeyMany
			}
			return "", errKeyChars
		}
	}
	return v, nil
}

func parseSFString(v string) (string, error) {
	var b strings.Builder
	escaped := false
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c < 0x20 || c > 0x7e:
			return "", errKeyQuoted
		case escaped:
			if c != '"' && c != '\\' {
				return "", errKeyQuoted
			}
			b.WriteByte(c)
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			if i != len(v)-1 {
				return "", errKeyQuoted // trailing data, parameters or a second member
			}
			key := b.String()
			switch {
			case key == "":
				return "", errKeyEmpty
			case len(key) > MaxKeyLength:
				return "", errKeyLong
			}
			return key, nil
		default:
			b.WriteByte(c)
		}
		if b.Len() > MaxKeyLength {
			return "", errKeyLong
		}
	}
	return "", errKeyQuoted // unterminated
}
