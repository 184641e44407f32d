package fingerprint

import (
	"fmt"
	"math"
	"strconv"
)

// maxNumberLen bounds a JSON number's text: a double's exact value never needs
// more (17 significant digits, leading or trailing zeros aside).
const maxNumberLen = 400

// emit writes the canonical form (RFC 8785) of node k, leaving out what ign
// (the ignored pointers below k, or nil) names: an object member is left out,
// an array element written as nothing between its commas (which no value is).
func (d *doc) emit(s *sink, k int32, ign *trie) {
	n := d.nodes[k]
	switch n.kind {
	case kObject:
		s.buf = append(s.buf, '{')
		first := true
		for _, c := range d.kids[n.a:n.b] {
			var t *trie
			if ign != nil {
				if t = ign.kids[string(d.nameBytes(c))]; t != nil && t.leaf {
					continue
				}
			}
			if !first {
				s.buf = append(s.buf, ',')
			}
			first = false
			s.buf = appendQuoted(s.buf, d.nameBytes(c))
			s.buf = append(s.buf, ':')
			d.emit(s, c, t)
		}
		s.buf = append(s.buf, '}')
	case kArray:
		s.buf = append(s.buf, '[')
		for i, c := range d.kids[n.a:n.b] {
			if i > 0 {
				s.buf = append(s.buf, ',')
			}
			var t *trie
			if ign != nil && ign.kids != nil {
				var num [20]byte
				if t = ign.kids[string(strconv.AppendInt(num[:0], int64(i), 10))]; t != nil && t.leaf {
					continue
				}
			}
			d.emit(s, c, t)
		}
		s.buf = append(s.buf, ']')
	case kString:
		d.tmp = appendUnescaped(d.tmp[:0], d.body[n.a:n.b])
		s.buf = appendQuoted(s.buf, d.tmp)
	case kNumber:
		text := d.body[n.a:n.b]
		if smallInt(text) { // its own canonical form, but for -0
			if string(text) == "-0" {
				text = text[1:]
			}
			s.buf = append(s.buf, text...)
			break
		}
		f, _ := strconv.ParseFloat(string(text), 64) // checked by scanNumber
		s.buf = appendES(s.buf, f)
	case kTrue:
		s.buf = append(s.buf, "true"...)
	case kFalse:
		s.buf = append(s.buf, "false"...)
	case kNull:
		s.buf = append(s.buf, "null"...)
	}
	s.flushIfFull()
}

// appendQuoted appends the decoded, valid UTF-8 string v as RFC 8785 writes
// it: '"' and '\' escaped, control characters as \b \t \n \f \r or \u00xx
// (lower-case hex), everything else as it is.
func appendQuoted(dst, v []byte) []byte {
	dst = append(dst, '"')
	for _, c := range v {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c >= 0x20:
			dst = append(dst, c)
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		default:
			const hex = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		}
	}
	return append(dst, '"')
}

// appendES appends f as ECMAScript's Number.prototype.toString writes it
// (RFC 8785 §3.2.2.3): the shortest digits that read back as f, in plain
// notation for exponents from -6 to 20, else in exponent notation; -0 is 0.
func appendES(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	digits, exp := shortest(buf[:0], f)
	k, n := len(digits), exp+1 // the value is 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(append(append(dst, digits[:n]...), '.'), digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(append(dst, '.'), digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// shortest returns the shortest decimal digits that read back as f > 0, and
// the exponent of the first: f = d.ddd × 10^exp.
func shortest(buf []byte, f float64) ([]byte, int) {
	b := strconv.AppendFloat(buf, f, 'e', -1, 64) // d.ddde±XX
	e := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == 'e' {
			e, _ = strconv.Atoi(string(b[i+1:]))
			b = b[:i]
			break
		}
	}
	if len(b) > 1 { // drop the point
		b = append(b[:1], b[2:]...)
	}
	return b, e
}

// scanNumber checks the number at body[i]: JSON's grammar, at most
// maxNumberLen characters, and a value an IEEE 754 double holds exactly (RFC
// 8785 compares doubles: 9007199254740993 would equal 9007199254740992, and
// 0.10000000000000001 equal 0.1, to an upstream that reads more digits than a
// double holds; such a number is refused rather than equated). 1.0, 1 and 1e0
// are one number. It returns the index after the number.
func (d *doc) scanNumber(i int) (int, error) {
	b := d.body
	j := i
	if b[j] == '-' {
		j++
	}
	intStart := j
	j = digitsEnd(b, j)
	if j == intStart || b[intStart] == '0' && j-intStart > 1 {
		return 0, d.fail("has a number that is not JSON")
	}
	intEnd, fracStart, fracEnd := j, j, j
	if j < len(b) && b[j] == '.' {
		fracStart = j + 1
		if j = digitsEnd(b, fracStart); j == fracStart {
			return 0, d.fail("has a number that is not JSON")
		}
		fracEnd = j
	}
	exp, expOK := 0, true
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		neg := false
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			neg = b[j] == '-'
			j++
		}
		start := j
		if j = digitsEnd(b, start); j == start {
			return 0, d.fail("has a number that is not JSON")
		}
		for _, c := range b[start:j] {
			if exp = exp*10 + int(c-'0'); exp > 1e6 {
				expOK = false // far beyond a double's range
				break
			}
		}
		if neg {
			exp = -exp
		}
	}
	if smallInt(b[i:j]) {
		return j, nil // exact, and written as ECMAScript would
	}
	if j-i > maxNumberLen {
		return 0, d.fail(fmt.Sprintf("has a number longer than %d characters", maxNumberLen))
	}
	f, err := strconv.ParseFloat(string(b[i:j]), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, d.fail("has a number beyond the range of an IEEE 754 double; send it as a string")
	}
	if !exactly(f, b[intStart:intEnd], b[fracStart:fracEnd], exp, expOK) {
		return 0, d.fail("has a number that an IEEE 754 double does not hold exactly (RFC 8785 compares doubles); send it as a string")
	}
	return j, nil
}

func digitsEnd(b []byte, j int) int {
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	return j
}

// exactly reports whether the decimal intPart.fracPart × 10^exp is the shortest
// decimal of f: the number as written is the double f.
func exactly(f float64, intPart, fracPart []byte, exp int, expOK bool) bool {
	lead := 0 // leading zeros of the digits
	for lead < len(intPart)+len(fracPart) && digitAt(intPart, fracPart, lead) == '0' {
		lead++
	}
	all := len(intPart) + len(fracPart)
	if lead == all { // zero, whatever its exponent
		return f == 0
	}
	if f == 0 || !expOK {
		return false
	}
	end := all // without trailing zeros
	for digitAt(intPart, fracPart, end-1) == '0' {
		end--
	}
	// The value is digits[lead:end] × 10^(exp - len(fracPart) + all - end).
	var buf [32]byte
	want, e := shortest(buf[:0], math.Abs(f))
	for len(want) > 1 && want[len(want)-1] == '0' {
		want = want[:len(want)-1]
	}
	if end-lead != len(want) || exp-len(fracPart)+all-end != e-(len(want)-1) {
		return false
	}
	for i := range want {
		if digitAt(intPart, fracPart, lead+i) != want[i] {
			return false
		}
	}
	return true
}

func digitAt(intPart, fracPart []byte, i int) byte {
	if i < len(intPart) {
		return intPart[i]
	}
	return fracPart[i-len(intPart)]
}

// smallInt reports whether a number's text (JSON's grammar) is an integer of
// at most 15 digits: a double holds it exactly, and ECMAScript writes it as it
// is (-0 aside).
func smallInt(text []byte) bool {
	if len(text) > 0 && text[0] == '-' {
		text = text[1:]
	}
	if len(text) > 15 {
		return false
	}
	for _, c := range text {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
