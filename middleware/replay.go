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
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// answerDuplicate answers a request whose key already has a record.
func (h *Handler) answerDuplicate(w http.ResponseWriter, r *http.Request, rec *cache.Record, fp, storeKey string, t *tracker) {
	t.ev.Origin = rec.Trace
	if rec.Response != nil {
		t.ev.Origin = rec.Response.Trace
	}
	switch {
	case rec.Fingerprint != fp:
		t.problem(w, OutcomeMismatch, nil, newProblem(ProblemMismatch, http.StatusUnprocessableEntity,
			h.mismatchDetail(rec.Fingerprint, fp)), 0)
	case rec.State != cache.StateCompleted || rec.Response == nil:
		t.problem(w, OutcomeConflict, nil, newProblem(ProblemInFlight, http.StatusConflict,
			"a request with this idempotency key is still being processed; retry later"), h.s.RetryAfter)
	case rec.Response.Oversize:
		p := newProblem(ProblemNotReplayable, http.StatusConflict, fmt.Sprintf(
			"the request with this idempotency key completed, but its %d-byte response was too large to store; it was not executed again",
			rec.Response.BodySize))
		p.OriginalStatus = rec.Response.Status
		t.problem(w, OutcomeNotReplayable, nil, p, 0)
	case t.grpc && rec.Response.Unknown:
		// A held outcome: the same answer for every retry, in gRPC's shape
		// (the stored one is the route's error format's).
		t.ev.Status = rec.Response.Status
		if t.ev.Outcome != OutcomeUnknown {
			t.ev.Outcome = OutcomeReplayed
		}
		t.emit()
		h.countReplay(storeKey, rec) // history.go
		w.Header().Set("Idempotent-Replayed", "true")
		h.writeProblem(w, heldProblem(rec), 0, t.key, true)
	default:
		resp := h.storedAnswer(rec)
		dec, err := needsDecoding(r, resp.Status, resp.Header, resp.Body, h.s.MaxBody) // below
		if err != nil {
			ce := strings.Join(contentCodings(resp.Header), ", ")
			p := newProblem(ProblemNotAcceptable, http.StatusNotAcceptable, fmt.Sprintf(
				"the request with this idempotency key completed, and its stored response is %s-encoded, which this request's Accept-Encoding does not accept; "+
					"%v; it was not executed again: retry with Accept-Encoding: %s", ce, err, ce))
			p.OriginalStatus = resp.Status
			t.problem(w, OutcomeNotReplayable, err, p, 0)
			return
		}
		// The body is held until the client took it: it counts in the
		// budget, or a client that never reads could hold any number of them.
		if !t.reserved.grow(min(int64(len(resp.Body)), h.budget.size)) {
			t.problem(w, OutcomeOverloaded, errReplayOverloaded, newProblem(ProblemOverloaded, http.StatusServiceUnavailable,
				"the bodies held in memory reached their budget; the request was not executed, retry later with the same key"), h.s.RetryAfter)
			return
		}
		if t.ev.Outcome != OutcomeUnknown { // a lapsed claim this request found: reported so
			t.ev.Outcome = OutcomeReplayed
		}
		t.ev.Status = resp.Status
		t.emit()
		h.countReplay(storeKey, rec) // history.go
		h.replayEchoing(w, resp, t.key, dec)
	}
}

// storedAnswer is the answer rec's response replays as: a held unknown
// outcome stored bare (in a full store) is rendered now, and so is a lapsed
// lease held as one.
func (h *Handler) storedAnswer(rec *cache.Record) *cache.Response {
	resp := rec.Response
	switch {
	case rec.Lapsed:
		return h.render(heldProblem(rec), resp.Trace)
	case resp.Unknown && resp.Header == nil && len(resp.Body) == 0:
		return h.unknownAnswer(resp.Status, resp.Trace)
	}
	return resp
}

// replay writes a stored response, its body decoded when dec is not nil; the
// client must take each piece of the body within timeout (see progressWriter).
func replay(w http.ResponseWriter, resp *cache.Response, dec *decodedBody, timeout time.Duration) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	delete(h, "Transfer-Encoding")
	delete(h, "Content-Length")
	size := int64(len(resp.Body))
	if dec != nil {
		decodedHeader(h)
		size = dec.size
	}
	if _, ok := resp.Header["Content-Encoding"]; ok {
		varyAcceptEncoding(h) // which body a replay gets depends on it
	}
	// A gRPC answer goes as its first execution did through a reverse proxy:
	// its trailers undeclared (no Trailer header, which gRPC metadata would
	// show), and unless it is trailers-only, its headers sent before the
	// message, without a Content-Length.
	grpc := isGRPCType(firstValue(resp.Header, "Content-Type"))
	// The two values this writes share one allocation; each is a slice of
	// its own capacity, so that appending to one never touches the other.
	vals := make([]string, 2)
	vals[0] = "true"
	h["Idempotent-Replayed"] = vals[0:1:1]
	if bodyAllowed(resp.Status) && len(resp.Trailer) == 0 && !grpc {
		vals[1] = strconv.FormatInt(size, 10) // trailers need chunked encoding
		h["Content-Length"] = vals[1:2:2]
	}
	if !grpc {
		for name := range resp.Trailer {
			h.Add("Trailer", name)
		}
	}
	w.WriteHeader(resp.Status)
	if grpc && (len(resp.Body) > 0 || len(resp.Trailer) > 0) {
		_ = http.NewResponseController(w).Flush()
	}
	switch {
	case !bodyAllowed(resp.Status) || len(resp.Body) == 0:
	case dec != nil:
		pw := progressWriter{w: w, timeout: timeout}
		_, _ = dec.copyTo(&pw, dec.size) // decoded once already: the same bytes
		pw.finish()
	default:
		writeBody(w, resp.Body, timeout)
	}
	for name, vals := range resp.Trailer {
		if grpc {
			name = http.TrailerPrefix + name
		}
		h[name] = vals // net/http sends them after the body
	}
}

// firstValue is h.Get(name) for a canonical name, without canonicalizing it
// again on every request.
func firstValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// A client's key never reaches the store verbatim (docs/clients.md, "Scope"), yet the
// answers a key's retries are replayed carry it back in the key header: the
// outcome-unknown answer the core writes, an upstream's answer that echoes the
// key (as Stripe's API does), a resolution that names the header. Such a stored
// answer holds the key header with one empty value instead of the key, and the
// replay fills in the key of the request it answers. That is the same key: the
// store key is a digest of the scope and the key, so only a request with this
// key reaches this record. (An upstream that itself sent the key header empty
// would have it replayed as the key: no API is known to.)

// markKeyEcho makes the key header of a stored answer's header the echo marker.
func (h *Handler) markKeyEcho(hdr http.Header) {
	if h.keyHeader != "" {
		hdr[h.keyHeader] = []string{""}
	}
}

// unechoKey replaces, in an upstream's answer about to be stored, a key header
// that echoes the client's key (every value equal to it) with the echo marker.
func (h *Handler) unechoKey(hdr http.Header, r *http.Request) {
	vals, ok := hdr[h.keyHeader]
	if !ok || h.keyHeader == "" {
		return
	}
	key := h.echoKey(r)
	for _, v := range vals {
		if key == "" || v != key {
			return
		}
	}
	h.markKeyEcho(hdr)
}

// replayEchoing replays resp (its body decoded when dec is not nil) to a request
// whose key (from a key header) is key, filling the echo marker in with it. A stored answer without the marker is
// replayed as it is.
func (h *Handler) replayEchoing(w http.ResponseWriter, resp *cache.Response, key string, dec *decodedBody) {
	name := h.keyHeader
	if vals := resp.Header[name]; len(vals) == 1 && vals[0] == "" {
		c := *resp
		c.Header = resp.Header.Clone()
		if key != "" {
			c.Header[name] = []string{key}
		} else {
			delete(c.Header, name) // the route takes its keys from elsewhere now
		}
		resp = &c
	}
	replay(w, resp, dec, h.s.BodyReadTimeout)
}

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
