package cache

import (
	"encoding/binary"
	"net/http"
)

// decodeResponseFast parses the encoding this package writes straight from the
// byte slice, on every replay's path: the header names and values are cut from
// one string copied from b, the body is one copy. It reports ok=false, having
// decided nothing, for anything outside the shapes EncodeMsgpack produces
// (unknown keys, extension types, floats, a truncated input, …), and the caller
// then decodes with the msgpack library, whose answer (a value or an error) is
// authoritative. FuzzFastDecoderAgrees holds the two to the same results.
//
// all, when not empty, is b as a string already (b is then only read): the
// names and values are cut from it, with no copy.
func decodeResponseFast(b []byte, all string) (resp *Response, ok bool) {
	r := &Response{}
	if !decodeResponseFastInto(r, b, all) {
		return nil, false
	}
	return r, true
}

// decodeResponseFastInto is decodeResponseFast into r, which starts as the
// zero Response (a caller that allocates the response with its record); r
// is left anyhow when it reports false. Every header's values are cut from
// one array, each a slice of its own capacity, so that appending to one never
// touches the next.
func decodeResponseFastInto(r *Response, b []byte, all string) bool {
	p := fastReader{b: b}
	n, ok := p.mapLen()
	if !ok {
		return false
	}
	// b as one string, made on the first string that needs it
	str := func(off, l int) string {
		if all == "" {
			all = string(b)
		}
		return all[off : off+l]
	}
	for range n {
		koff, kl, ok := p.strSpan()
		if !ok || kl != 1 {
			return false
		}
		switch b[koff] {
		case 's':
			v, ok := p.int()
			if !ok || v < -1<<31 || v > 1<<31 {
				return false
			}
			r.Status = int(v)
		case 'h':
			if p.nil() {
				r.Header = nil // a repeated key: the last one wins, as in the library
				continue
			}
			hn, ok := p.mapLen()
			if !ok || hn > 1<<16 {
				return false
			}
			r.Header = make(http.Header, hn)
			var vals []string // the values of every header, one array
			for range hn {
				noff, nl, ok := p.strSpan()
				if !ok {
					return false
				}
				name := str(noff, nl)
				if p.nil() {
					r.Header[name] = nil
					continue
				}
				vn, ok := p.arrayLen()
				if !ok || vn > 1<<16 {
					return false
				}
				if vals == nil {
					vals = make([]string, 0, hn) // one value a header, most often
				}
				start := len(vals)
				for range vn {
					voff, vl, ok := p.strSpan()
					if !ok {
						return false
					}
					vals = append(vals, str(voff, vl))
				}
				r.Header[name] = vals[start:len(vals):len(vals)]
			}
		case 'b':
			if p.nil() {
				r.Body = nil
				continue
			}
			off, l, ok := p.binSpan()
			if !ok {
				return false
			}
			r.Body = make([]byte, l) // empty, not nil, for a zero-length bin, as the library has it
			copy(r.Body, b[off:off+l])
		case 'x':
			if p.nil() {
				r.Trace = nil
				continue
			}
			off, l, ok := p.binSpan()
			if !ok || l > MaxTrace {
				return false
			}
			r.Trace = make([]byte, l) // empty, not nil, for a zero-length bin, as the library has it
			copy(r.Trace, b[off:off+l])
		case 'i':
			off, l, ok := p.strSpan()
			if !ok {
				return false
			}
			r.Info = str(off, l) // with the headers: no copy of its own
		case 'o':
			v, ok := p.bool()
			if !ok {
				return false
			}
			r.Oversize = v
		case 'n':
			v, ok := p.int()
			if !ok {
				return false
			}
			r.BodySize = v
		default:
			return false
		}
	}
	return true
}

// fastReader reads msgpack values from b; every method reports ok=false (and
// may leave the position anywhere) for a code it does not take or a value
// that runs past the end.
type fastReader struct {
	b   []byte
	pos int
}

func (p *fastReader) code() (byte, bool) {
	if p.pos >= len(p.b) {
		return 0, false
	}
	c := p.b[p.pos]
	p.pos++
	return c, true
}

// uint reads an n-byte big-endian unsigned integer.
func (p *fastReader) uint(n int) (uint64, bool) {
	if n > len(p.b)-p.pos {
		return 0, false
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(p.b[p.pos])
	case 2:
		v = uint64(binary.BigEndian.Uint16(p.b[p.pos:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(p.b[p.pos:]))
	case 8:
		v = binary.BigEndian.Uint64(p.b[p.pos:])
	}
	p.pos += n
	return v, true
}

// nil consumes a nil if one is next.
func (p *fastReader) nil() bool {
	if p.pos < len(p.b) && p.b[p.pos] == 0xc0 {
		p.pos++
		return true
	}
	return false
}

// mapLen and arrayLen read a fixmap/map16 or fixarray/array16 length; the
// 32-bit forms and the rest are left to the library.
func (p *fastReader) mapLen() (int, bool)   { return p.containerLen(0x80, 0xde) }
func (p *fastReader) arrayLen() (int, bool) { return p.containerLen(0x90, 0xdc) }

func (p *fastReader) containerLen(fix, code16 byte) (int, bool) {
	c, ok := p.code()
	switch {
	case !ok:
		return 0, false
	case c&0xf0 == fix:
		return int(c & 0x0f), true
	case c == code16:
		v, ok := p.uint(2)
		return int(v), ok
	}
	return 0, false
}

// span skips l bytes and returns where they start.
func (p *fastReader) span(l uint64) (int, int, bool) {
	if l > uint64(len(p.b)-p.pos) {
		return 0, 0, false
	}
	off := p.pos
	p.pos += int(l)
	return off, int(l), true
}

// strSpan reads a str and returns where its bytes are.
func (p *fastReader) strSpan() (int, int, bool) {
	if p.pos < len(p.b) && p.b[p.pos]&0xe0 == 0xa0 { // fixstr
		l := p.b[p.pos] & 0x1f
		p.pos++
		return p.span(uint64(l))
	}
	return p.sizedSpan(0xd9) // str8, str16, str32
}

// binSpan reads a bin and returns where its bytes are.
func (p *fastReader) binSpan() (int, int, bool) { return p.sizedSpan(0xc4) } // bin8, bin16, bin32

// sizedSpan reads a value whose codes are code8, code8+1 and code8+2 for 1-, 2-
// and 4-byte lengths.
func (p *fastReader) sizedSpan(code8 byte) (int, int, bool) {
	c, ok := p.code()
	if !ok || c < code8 || c > code8+2 {
		return 0, 0, false
	}
	l, ok := p.uint(1 << (c - code8))
	if !ok {
		return 0, 0, false
	}
	return p.span(l)
}

func (p *fastReader) int() (int64, bool) {
	c, ok := p.code()
	if !ok {
		return 0, false
	}
	switch {
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	}
	switch c {
	case 0xcc, 0xcd, 0xce:
		v, ok := p.uint(1 << (c - 0xcc))
		return int64(v), ok
	case 0xd0:
		v, ok := p.uint(1)
		return int64(int8(v)), ok
	case 0xd1:
		v, ok := p.uint(2)
		return int64(int16(v)), ok
	case 0xd2:
		v, ok := p.uint(4)
		return int64(int32(v)), ok
	case 0xd3:
		v, ok := p.uint(8)
		return int64(v), ok
	}
	return 0, false // uint64, floats and the rest: the library decides
}

func (p *fastReader) bool() (bool, bool) {
	c, ok := p.code()
	switch {
	case !ok:
		return false, false
	case c == 0xc2:
		return false, true
	case c == 0xc3:
		return true, true
	}
	return false, false
}
