package middleware

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// A request's identity: its key (from its source), the store key its record
// is kept under (the key in its scope), the owner its records belong to, and
// the fingerprint that tells a repeat from another request under the same key;
// each hashed with a pooled digest.

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

// HeaderKey takes the key from a request header (ParseKey: one RFC 8941
// sf-string or bare token of 1–255 visible ASCII characters). It is the core's
// default, on Settings.KeyHeader. The core echoes a header key back on the
// answers it writes, as Stripe does.
type HeaderKey struct {
	Name string // canonical (http.CanonicalHeaderKey)
}

// Key implements KeySource.
func (k HeaderKey) Key(r *http.Request, _ []byte) (string, error) {
	values, ok := r.Header[k.Name] // the name as compile makes it: canonical
	if !ok {
		values = r.Header.Values(k.Name) // one a caller spelt otherwise
	}
	if len(values) == 0 {
		return "", ErrNoKey
	}
	return ParseKey(values)
}

// NeedsBody implements KeySource.
func (HeaderKey) NeedsBody() bool { return false }

// ID implements KeySource.
func (HeaderKey) ID() string { return "header" }

// Describe implements KeySource.
func (k HeaderKey) Describe() string { return "an " + k.Name + " header" }

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
	for _, name := range h.compiled.fpHeaders {
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
	for _, name := range h.compiled.fpHeaders {
		hd := getDigest()
		hd.header(r.Header, name)
		var sum [sha256.Size]byte
		p = appendPartSum(p, partHeader, name, hd.sum(sum[:0]))
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

// StoreKey returns the store key for key as sent with r: a hex SHA-256 of the
// key's namespace (key_namespace and the key source that produced it), the
// request's scope and the key, so keys of different clients, or of different
// sources, never meet and a client's key never reaches the store verbatim. The
// Host is read in canonical form (CanonicalHost).
func (h *Handler) StoreKey(r *http.Request, key string) string {
	host, err := CanonicalHost(r.Host)
	if err != nil {
		host = r.Host // no request with this Host is ever claimed
	}
	return h.storeKey(r, host, key)
}

// storeKey is StoreKey with the canonical Host.
func (h *Handler) storeKey(r *http.Request, host, key string) string {
	d := getDigest()
	defer digests.Put(d)
	h.writeScope(d, r, host)
	d.field(key)
	// The sum goes into the digest's own buffer, as in owner: a local array
	// would escape through the hash.Hash interface.
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], d.sum(d.buf[:0]))
	return string(out[:]) // one allocation, where EncodeToString makes two
}

// storeKeyV2 marks a store key derived with its namespace. A Host never
// contains '/', so no scope of the first derivation can begin with it.
const storeKeyV2 = "idemproxy/2"

// writeScope writes what a key belongs to.
//
// A header key on a route with no key_namespace, scoped by the Host, keeps the
// first derivation (the Host, the scope headers, then the key), so records
// stored by earlier versions are still found. Every other route's keys begin
// with storeKeyV2, the namespace and the key source (a webhook's preset
// included), so a header key can never claim the store key of a webhook id or
// of a body-derived key. A webhook route's scope is the route and the signed
// key alone: the Host and the other headers are not signed, and a captured
// delivery must not run again under another Host.
func (h *Handler) writeScope(d *digest, r *http.Request, host string) {
	s, c := &h.s, h.compiled
	if !c.legacyScope {
		d.field(storeKeyV2)
		d.field(s.KeyNamespace)
		d.field(c.keySourceID)
		if s.Verifier != nil {
			return
		}
		if s.ScopeFunc != nil {
			d.field("func")
			d.field(s.ScopeFunc(r))
			return
		}
		if s.ScopeHost {
			d.field("host")
			d.field(host)
		} else {
			d.field("no-host")
		}
	} else if s.ScopeFunc != nil {
		d.field(s.ScopeFunc(r))
		return
	} else {
		d.field(host)
	}
	for _, sp := range c.scope {
		if sp.cookie {
			d.cookie(r, sp.name)
		} else {
			d.header(r.Header, sp.name)
		}
	}
}

// digest is a SHA-256 state with a scratch buffer: fields are length-prefixed (so
// their boundaries are unambiguous) and gathered before hashing, which spares an
// allocation per field. Recycled through digests.
type digest struct {
	h   hash.Hash
	buf []byte
}

var digests = sync.Pool{New: func() any { return &digest{h: sha256.New(), buf: make([]byte, 0, 512)} }}

func getDigest() *digest {
	d := digests.Get().(*digest)
	d.h.Reset()
	d.buf = d.buf[:0]
	return d
}

func (d *digest) field(s string) {
	d.buf = binary.BigEndian.AppendUint64(d.buf, uint64(len(s)))
	d.buf = append(d.buf, s...)
	if len(d.buf) > 4096 {
		d.flush()
	}
}

// fields adds one field: a and b joined by sep.
func (d *digest) fields(sep, a, b string) {
	d.buf = binary.BigEndian.AppendUint64(d.buf, uint64(len(a)+len(sep)+len(b)))
	d.buf = append(append(append(d.buf, a...), sep...), b...)
	if len(d.buf) > 4096 {
		d.flush()
	}
}

// header adds the values of the header name, which is canonical (the map is
// read directly: Values would canonicalize it again on every request).
func (d *digest) header(hdr http.Header, name string) {
	vals := hdr[name]
	d.buf = binary.BigEndian.AppendUint64(d.buf, uint64(len(vals)))
	for _, v := range vals {
		d.field(v)
	}
}

// cookie adds the raw values of every cookie named name (in the order sent; see
// eachCookie).
func (d *digest) cookie(r *http.Request, name string) {
	lines, n := r.Header["Cookie"], 0
	eachCookie(lines, name, func(string) { n++ })
	d.buf = binary.BigEndian.AppendUint64(d.buf, uint64(n))
	eachCookie(lines, name, d.field)
}

func (d *digest) flush() {
	_, _ = d.h.Write(d.buf)
	d.buf = d.buf[:0]
}

func (d *digest) sum(b []byte) []byte {
	d.flush()
	if cap(d.buf) > 64<<10 {
		d.buf = make([]byte, 0, 512) // do not keep a huge scratch buffer pooled
	}
	return d.h.Sum(b)
}

// Lock tokens need only be unique per claim across every process sharing a
// store (they fence writes; they are never shown to clients). A random 64-bit
// prefix per process and a counter give that without a trip to the system's
// random source per request.
var (
	tokenPrefix = func() (p [8]byte) {
		_, _ = rand.Read(p[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
		return p
	}()
	tokenCounter atomic.Uint64
)

func newToken() string {
	var b [16]byte
	copy(b[:8], tokenPrefix[:])
	binary.BigEndian.PutUint64(b[8:], tokenCounter.Add(1))
	var out [32]byte
	hex.Encode(out[:], b[:])
	return string(out[:])
}

// ownerDomain keeps an owner digest apart from every store key: both hash the
// scope, and only the store key goes on to hash the client's key.
const ownerDomain = "idemproxy owner"

// owner returns the client scope a request's records belong to, as
// cache.Claim.Owner: 16 hex digits of a SHA-256 of exactly the scope the store
// key uses (writeScope: the namespace and key source, and the scope function's
// result or the canonical Host and the scope headers and cookies), so a client's credential never reaches the store. A bounded
// store shares its room by owner (the memory store's eviction).
func (h *Handler) owner(r *http.Request, host string) string {
	d := getDigest()
	defer digests.Put(d)
	d.field(ownerDomain)
	h.writeScope(d, r, host)
	// The sum goes into the digest's own (pooled, just flushed) buffer: a
	// local array would escape through the hash.Hash interface.
	sum := d.sum(d.buf[:0])
	var out [16]byte
	hex.Encode(out[:], sum[:8])
	return string(out[:])
}

// eachCookie calls f with the value of every cookie named name in the Cookie
// header lines, in the order sent, raw: byte for byte as the client sent it
// (quotes, backslashes and non-ASCII bytes included), with only the optional
// whitespace around the pair, its name and its value trimmed.
//
// It is the scope's cookie parser, and deliberately not net/http's: that one
// drops a value with a quote, a backslash or a non-ASCII byte, and every cookie
// once a request carries more than 3000, so sessions that differ only there
// would share one scope. Nothing is dropped here and there is no count limit;
// the server's header size limit bounds the work.
func eachCookie(lines []string, name string, f func(value string)) {
	for _, line := range lines {
		for line != "" {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			n, v, ok := strings.Cut(pair, "=")
			if ok && trimOWS(n) == name {
				f(trimOWS(v))
			}
		}
	}
}

// trimOWS trims optional whitespace (spaces and tabs, RFC 9110 §5.6.3).
func trimOWS(s string) string { return strings.Trim(s, " \t") }
