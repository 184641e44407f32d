package cache

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Response is encoded by hand: it is on every replay's path, and msgpack's
// reflection cost more than the rest of a replay. The wire format is the plain
// msgpack map the struct tags describe ({"s": status, "h": headers, "b": body,
// "o": oversize, "n": body size, "t": trailers, "u": unknown outcome, "x": trace context, "i": info, as EncodeInfo writes it}, empty fields left out), so either side can be
// decoded by any msgpack reader.

var (
	_ msgpack.CustomEncoder = (*Response)(nil)
	_ msgpack.CustomDecoder = (*Response)(nil)
)

// EncodeMsgpack implements msgpack.CustomEncoder.
func (r *Response) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 1
	if len(r.Header) > 0 {
		n++
	}
	if len(r.Body) > 0 {
		n++
	}
	if r.Oversize {
		n++
	}
	if r.BodySize != 0 {
		n++
	}
	if len(r.Trailer) > 0 {
		n++
	}
	if r.Unknown {
		n++
	}
	if len(r.Trace) > 0 {
		n++
	}
	if r.Info != "" {
		n++
	}
	if err := enc.EncodeMapLen(n); err != nil {
		return err
	}
	if err := enc.EncodeString("s"); err != nil {
		return err
	}
	if err := enc.EncodeInt(int64(r.Status)); err != nil {
		return err
	}
	if len(r.Header) > 0 {
		if err := encodeHeader(enc, "h", r.Header); err != nil {
			return err
		}
	}
	if len(r.Body) > 0 {
		if err := enc.EncodeString("b"); err != nil {
			return err
		}
		if err := enc.EncodeBytes(r.Body); err != nil {
			return err
		}
	}
	if r.Oversize {
		if err := enc.EncodeString("o"); err != nil {
			return err
		}
		if err := enc.EncodeBool(true); err != nil {
			return err
		}
	}
	if r.BodySize != 0 {
		if err := enc.EncodeString("n"); err != nil {
			return err
		}
		if err := enc.EncodeInt(r.BodySize); err != nil {
			return err
		}
	}
	if len(r.Trailer) > 0 {
		if err := encodeHeader(enc, "t", r.Trailer); err != nil {
			return err
		}
	}
	if r.Unknown {
		if err := enc.EncodeString("u"); err != nil {
			return err
		}
		if err := enc.EncodeBool(true); err != nil {
			return err
		}
	}
	if len(r.Trace) > 0 {
		if err := enc.EncodeString("x"); err != nil {
			return err
		}
		if err := enc.EncodeBytes(r.Trace); err != nil {
			return err
		}
	}
	if r.Info != "" {
		if err := enc.EncodeString("i"); err != nil {
			return err
		}
		if err := enc.EncodeString(r.Info); err != nil {
			return err
		}
	}
	return nil
}

// encodeHeader writes key and a header map, its names in sorted order: the
// same response always encodes to the same bytes, so a store can name what it
// wrote by their digest and recognise it when the same response is written
// again (the DynamoDB store's chunk version).
func encodeHeader(enc *msgpack.Encoder, key string, h http.Header) error {
	if err := enc.EncodeString(key); err != nil {
		return err
	}
	if err := enc.EncodeMapLen(len(h)); err != nil {
		return err
	}
	var buf [32]string // most responses: no allocation
	names := buf[:0]
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		vs := h[k]
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.EncodeArrayLen(len(vs)); err != nil {
			return err
		}
		for _, v := range vs {
			if err := enc.EncodeString(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder. Unknown keys are skipped, so a
// newer writer's extra fields do not break an older reader.
func (r *Response) DecodeMsgpack(dec *msgpack.Decoder) error {
	*r = Response{}
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("response is nil")
	}
	for i := 0; i < n; i++ {
		key, err := dec.DecodeString()
		if err != nil {
			return err
		}
		switch key {
		case "s":
			s, err := dec.DecodeInt()
			if err != nil {
				return err
			}
			r.Status = s
		case "h":
			if r.Header, err = decodeHeader(dec); err != nil {
				return err
			}
		case "t":
			if r.Trailer, err = decodeHeader(dec); err != nil {
				return err
			}
		case "u":
			if r.Unknown, err = dec.DecodeBool(); err != nil {
				return err
			}
		case "b":
			if r.Body, err = dec.DecodeBytes(); err != nil {
				return err
			}
		case "o":
			if r.Oversize, err = dec.DecodeBool(); err != nil {
				return err
			}
		case "x":
			if r.Trace, err = dec.DecodeBytes(); err != nil {
				return err
			}
		case "n":
			if r.BodySize, err = dec.DecodeInt64(); err != nil {
				return err
			}
		case "i":
			if r.Info, err = dec.DecodeString(); err != nil {
				return err
			}
		default:
			if err := skipBounded(dec, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeHeader reads a header map (nil for msgpack nil).
func decodeHeader(dec *msgpack.Decoder) (http.Header, error) {
	hn, err := dec.DecodeMapLen()
	if err != nil || hn < 0 {
		return nil, err
	}
	if hn > 1<<16 {
		return nil, fmt.Errorf("%d headers", hn)
	}
	h := make(http.Header, hn)
	for range hn {
		name, err := dec.DecodeString()
		if err != nil {
			return nil, err
		}
		vn, err := dec.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		if vn < 0 {
			h[name] = nil
			continue
		}
		if vn > 1<<16 {
			return nil, fmt.Errorf("%d values for one header", vn)
		}
		vals := make([]string, vn)
		for k := range vals {
			if vals[k], err = dec.DecodeString(); err != nil {
				return nil, err
			}
		}
		h[name] = vals
	}
	return h, nil
}

// maxSkipDepth bounds the nesting of an unknown field's value. The library's
// Skip recurses once per level, and a deep enough value overflows the stack,
// which is fatal: no recover catches it.
const maxSkipDepth = 32

// skipBounded skips one value, refusing nesting deeper than maxSkipDepth.
func skipBounded(dec *msgpack.Decoder, depth int) error {
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	isArray := msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
	isMap := msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
	if !isArray && !isMap {
		return dec.Skip() // a scalar, a string, bytes or an extension: no nesting
	}
	if depth >= maxSkipDepth {
		return fmt.Errorf("a value nested deeper than %d levels", maxSkipDepth)
	}
	var n int
	if isArray {
		n, err = dec.DecodeArrayLen()
	} else {
		n, err = dec.DecodeMapLen()
		n *= 2 // keys and values
	}
	if err != nil {
		return err
	}
	for range n {
		if err := skipBounded(dec, depth+1); err != nil {
			return err
		}
	}
	return nil
}
