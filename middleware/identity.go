package middleware

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"
)

// A fingerprint decides whether a repeat is the same request: a SHA-256 of the
// method, the canonical path and query, the fingerprint headers and the body
// (read by Settings.BodyFingerprint, or its bytes; left out on a signed
// webhook route). With a BodyFingerprint, the SHA-256 is followed by the
// digests of the request's parts (partsMark, then part entries), so that a
// mismatch can name the part that differs; the whole string is compared, and
// equal requests give equal strings. Without one the fingerprint is the
// SHA-256 alone, as every earlier version wrote it.

// Bounds on the parts kept with a record.
const (
	maxBodyParts = 32  // body parts kept; the others count in the SHA-256 only
	maxPartName  = 128 // longer names are not kept
	partsMark    = 'P' // begins the parts after the SHA-256
)

// Part kinds, as kept.
const (
	partMethod byte = iota + 1
	partPath
	partQuery
	partHeader
	partBody
	partMore // body parts were left out: a missing name proves nothing
)

// fingerprint identifies the request (see above). An error is the
// BodyFingerprint's: the body cannot be read one way only.
func (h *Handler) fingerprint(r *http.Request, path string, body []byte) (string, error) {
	if h.s.FingerprintFunc != nil {
		return h.s.FingerprintFunc(r, body), nil
	}
	d := getDigest()
	defer digests.Put(d)
	d.field(r.Method)
	if r.URL.ForceQuery || r.URL.RawQuery != "" {
		d.fields("?", path, r.URL.RawQuery) // one field, as URL.RequestURI writes it
	} else {
		d.field(path)
	}
	for _, name := range h.s.FingerprintHeaders {
		d.header(r.Header, name)
	}
	d.flush()
	bf := h.s.BodyFingerprint
	if bf == nil {
		if h.s.Verifier == nil {
			// A signed webhook's key is the provider's own id for the event (or a
			// digest of the body): the body is left out, since a provider may render
			// it anew on redelivery (Stripe's pending_webhooks), which must replay,
			// not get 422. (compile refuses a BodyFingerprint with a Verifier.)
			_, _ = d.h.Write(body)
		}
		return string(d.sum(d.buf[:0])), nil // the digest's buffer: see owner
	}
	p := make([]byte, 0, 256)
	p = append(p, partsMark)
	p = appendPart(p, partMethod, "", r.Method)
	p = appendPart(p, partPath, "", path)
	p = appendPart(p, partQuery, "", r.URL.RawQuery)
	for _, name := range h.s.FingerprintHeaders {
		hd := getDigest()
		hd.header(r.Header, name)
		var sum [sha256.Size]byte
		p = appendPartSum(p, partHeader, http.CanonicalHeaderKey(name), hd.sum(sum[:0]))
		digests.Put(hd)
	}
	d.field(bf.ID())
	kept, more := 0, false
	err := bf.Parts(r, body, func(name string, sum [sha256.Size]byte) {
		d.field(name)
		d.field(string(sum[:]))
		if kept < maxBodyParts && len(name) <= maxPartName {
			p = appendPartSum(p, partBody, name, sum[:])
			kept++
		} else {
			more = true
		}
	})
	if err != nil {
		return "", err
	}
	if more {
		p = appendPartSum(p, partMore, "", nil)
	}
	var sum [sha256.Size]byte
	return string(append(d.sum(sum[:0]), p...)), nil
}

// appendPart appends a part whose digest is that of value.
func appendPart(p []byte, kind byte, name, value string) []byte {
	sum := sha256.Sum256([]byte(value))
	return appendPartSum(p, kind, name, sum[:])
}

// appendPartSum appends a part entry: kind, name length (uvarint), name, the
// first 8 bytes of its digest (enough to say which part differs; the SHA-256
// before the parts decides whether the requests differ).
func appendPartSum(p []byte, kind byte, name string, sum []byte) []byte {
	p = append(p, kind)
	p = binary.AppendUvarint(p, uint64(len(name)))
	p = append(p, name...)
	var short [8]byte
	copy(short[:], sum)
	return append(p, short[:]...)
}

// fpPart is one kept part.
type fpPart struct {
	kind byte
	name string
	sum  [8]byte
}

// fpParts reads the parts kept in fp; ok is false when it keeps none (the
// bytes reading, a FingerprintFunc, or malformed).
func fpParts(fp string) (parts []fpPart, ok bool) {
	if len(fp) <= sha256.Size || fp[sha256.Size] != partsMark {
		return nil, false
	}
	b := []byte(fp[sha256.Size+1:])
	for len(b) > 0 {
		kind := b[0]
		n, w := binary.Uvarint(b[1:])
		if w <= 0 || n > maxPartName || uint64(len(b)-1-w) < n+8 {
			return nil, false
		}
		var pt fpPart
		pt.kind, pt.name = kind, string(b[1+w:1+w+int(n)])
		copy(pt.sum[:], b[1+w+int(n):])
		parts = append(parts, pt)
		b = b[1+w+int(n)+8:]
	}
	return parts, true
}

// mismatchDetail is the 422 problem's detail for a request whose fingerprint fp
// differs from the record's stored: with a BodyFingerprint, it names the parts
// that differ (at most three), never a value.
func (h *Handler) mismatchDetail(stored, fp string) string {
	const generic = "this idempotency key was already used with a different request (method, path, query or body)"
	if h.s.BodyFingerprint == nil {
		return generic
	}
	was, ok1 := fpParts(stored)
	now, ok2 := fpParts(fp)
	if !ok1 || !ok2 {
		return generic
	}
	diff := diffParts(was, now)
	if len(diff) == 0 {
		diff = []string{"the body"} // beyond the parts kept
	}
	more := ""
	if len(diff) > 3 {
		diff, more = diff[:3], " and more"
	}
	return "this idempotency key was already used with a different request: it differs in " + strings.Join(diff, ", ") + more
}

// diffParts names the parts that differ between two kept lists.
func diffParts(was, now []fpPart) []string {
	var out []string
	seen := map[[2]string]bool{}
	index := func(ps []fpPart) (map[string]fpPart, bool) {
		m, more := map[string]fpPart{}, false
		for _, p := range ps {
			if p.kind == partMore {
				more = true
			}
			m[string(p.kind)+p.name] = p
		}
		return m, more
	}
	wasM, wasMore := index(was)
	nowM, nowMore := index(now)
	add := func(p fpPart) {
		k := [2]string{string(p.kind), p.name}
		if !seen[k] {
			seen[k] = true
			out = append(out, partLabel(p))
		}
	}
	for _, p := range now {
		if p.kind == partMore {
			continue
		}
		q, found := wasM[string(p.kind)+p.name]
		if found && q.sum != p.sum || !found && (p.kind != partBody || !wasMore) {
			add(p)
		}
	}
	for _, p := range was {
		if _, found := nowM[string(p.kind)+p.name]; !found && p.kind != partMore && (p.kind != partBody || !nowMore) {
			add(p)
		}
	}
	return out
}

// partLabel is how a problem names a part.
func partLabel(p fpPart) string {
	switch p.kind {
	case partMethod:
		return "the method"
	case partPath:
		return "the path"
	case partQuery:
		return "the query"
	case partHeader:
		return "the header " + p.name
	}
	if p.name == "" {
		return "the body"
	}
	if strings.HasPrefix(p.name, "/") && !plainPointer(p.name) {
		return strconv.Quote(p.name) // a member name may hold anything
	}
	return p.name
}

// plainPointer reports whether a pointer is printable ASCII without spaces or
// quotes, shown as it is.
func plainPointer(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] >= 0x7f || p[i] == '"' || p[i] == '\\' {
			return false
		}
	}
	return true
}
