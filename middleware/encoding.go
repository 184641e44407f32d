package middleware

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// A stored response keeps the bytes the first request got, in the content
// coding that request accepted. A retry that does not accept that coding (a
// client that sent Accept-Encoding: gzip the first time and nothing the second)
// gets the body decoded instead: the core reads gzip and deflate, with the
// standard library only. It asks the upstream of a first execution for those
// codings alone, so every body it stores can be decoded; a body in another
// coding (br, zstd), sent by an upstream that ignored the request's
// Accept-Encoding, is replayed as stored to retries that accept it, and
// answered 406 (not-acceptable) to those that do not. Decoding streams: it
// never holds more than the decoder's window, and a body that decodes to more
// than max_body bytes (a decompression bomb) is answered 406 as well.

// maxCodings bounds the content codings a replay decodes in a row.
const maxCodings = 3

// decodable are the content codings the core decodes, by their lower-case names.
var decodable = map[string]bool{"gzip": true, "x-gzip": true, "deflate": true}

// errUndecodable: a stored body's coding the core does not read.
var errUndecodable = errors.New("a content coding this proxy cannot decode")

// narrowAcceptEncoding leaves, in the Accept-Encoding of a request about to be
// executed for the first time, only the codings a replay can decode (and
// identity), so that no retry gets a body it cannot read. A header left empty
// is removed: the upstream answers uncompressed.
func narrowAcceptEncoding(h http.Header) {
	vals, ok := h["Accept-Encoding"]
	if !ok {
		return
	}
	var keep []string
	for _, v := range vals {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.TrimSpace(part)
			name, _, _ := strings.Cut(part, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if decodable[name] || name == "identity" {
				keep = append(keep, part)
			}
		}
	}
	if len(keep) == 0 {
		h.Del("Accept-Encoding")
		return
	}
	h["Accept-Encoding"] = []string{strings.Join(keep, ", ")}
}

// contentCodings returns the codings of a stored response's Content-Encoding
// in the order they were applied (identity left out), lower case.
func contentCodings(h http.Header) []string {
	var out []string
	for _, v := range h["Content-Encoding"] {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// accepts reports whether the Accept-Encoding of r accepts coding. A request
// without the header accepts none: RFC 9110 would allow any, yet the clients
// that send none (curl without --compressed, a script) cannot read a
// compressed body, and one that sent the header the first time may not the
// next. gzip and x-gzip are one coding; "*" stands for any coding not named;
// q=0 refuses.
func accepts(r *http.Request, coding string) bool {
	if coding == "x-gzip" {
		coding = "gzip"
	}
	star := false
	for _, v := range r.Header["Accept-Encoding"] {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "x-gzip" {
				name = "gzip"
			}
			switch name {
			case coding:
				return qualityAbove0(params)
			case "*":
				star = qualityAbove0(params)
			}
		}
	}
	return star
}

// qualityAbove0 reads the q parameter of an Accept-Encoding entry: true when
// it is absent or above 0; false for 0 and for a weight that is not one.
func qualityAbove0(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		if !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return err == nil && q > 0 && q <= 1
	}
	return true
}

// decodedBody is a stored body to be sent decoded: its codings in the order
// they were applied, and its decoded size, known before anything is written.
type decodedBody struct {
	src     []byte
	codings []string
	size    int64
}

// needsDecoding returns the decoded form of resp's body for r, or nil when
// r accepts the body as stored. err says why a body r does not accept cannot
// be decoded within max bytes; the caller answers 406.
func needsDecoding(r *http.Request, status int, hdr http.Header, body []byte, max int64) (*decodedBody, error) {
	if !bodyAllowed(status) || len(body) == 0 {
		return nil, nil
	}
	codings := contentCodings(hdr)
	if len(codings) == 0 {
		return nil, nil
	}
	all := true
	for _, c := range codings {
		all = all && accepts(r, c)
	}
	if all {
		return nil, nil
	}
	if len(codings) > maxCodings {
		return nil, fmt.Errorf("it is encoded %d times over (%s)", len(codings), strings.Join(codings, ", "))
	}
	for _, c := range codings {
		if !decodable[c] {
			return nil, fmt.Errorf("it is %s, %w", c, errUndecodable)
		}
	}
	d := &decodedBody{src: body, codings: codings}
	n, err := d.copyTo(io.Discard, max+1) // first pass: the size, in constant memory
	if err != nil {
		return nil, fmt.Errorf("its %s bytes do not decode: %w", strings.Join(codings, ", "), err)
	}
	if n > max {
		return nil, fmt.Errorf("it decodes to more than max_body (%d bytes)", max)
	}
	d.size = n
	return d, nil
}

// copyTo writes at most limit decoded bytes to w and returns how many it wrote.
func (d *decodedBody) copyTo(w io.Writer, limit int64) (int64, error) {
	var rd io.Reader = bytes.NewReader(d.src)
	for i := len(d.codings) - 1; i >= 0; i-- { // the last applied comes off first
		dec, err := decoder(d.codings[i], rd)
		if err != nil {
			return 0, err
		}
		defer dec.Close()
		rd = dec
	}
	return io.Copy(w, io.LimitReader(rd, limit))
}

// decoder reads one content coding. HTTP's deflate is the zlib format; a raw
// deflate stream, which some servers send under that name, is read too.
func decoder(coding string, rd io.Reader) (io.ReadCloser, error) {
	switch coding {
	case "gzip", "x-gzip":
		return gzip.NewReader(rd)
	case "deflate":
		br := bufio.NewReader(rd)
		if head, err := br.Peek(2); err == nil && zlibHeader(head) {
			return zlib.NewReader(br)
		}
		return flate.NewReader(br), nil
	}
	return nil, errUndecodable
}

// zlibHeader reports whether b starts a zlib stream (RFC 1950: deflate
// method, and a check value making the first two bytes a multiple of 31).
func zlibHeader(b []byte) bool {
	return b[0]&0x0f == 8 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0
}

// decodedHeader adjusts a replay's header for a decoded body: no
// Content-Encoding, digests of the encoded bytes dropped, a strong ETag made
// weak (the representation is equivalent, not byte-identical).
func decodedHeader(hdr http.Header) {
	for _, k := range []string{"Content-Encoding", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest"} {
		delete(hdr, k)
	}
	if et := hdr.Get("Etag"); et != "" && !strings.HasPrefix(et, "W/") {
		hdr.Set("Etag", "W/"+et)
	}
}

// varyAcceptEncoding adds Accept-Encoding to Vary, unless Vary already names
// it or is "*": a replay of an encoded body depends on it.
func varyAcceptEncoding(hdr http.Header) {
	for _, v := range hdr["Vary"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, "Accept-Encoding") {
				return
			}
		}
	}
	vary := hdr["Vary"]
	hdr["Vary"] = append(vary[:len(vary):len(vary)], "Accept-Encoding") // never into the stored record's array
}
