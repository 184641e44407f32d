package middleware

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"sync"
	"sync/atomic"
)

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

func (d *digest) header(hdr http.Header, name string) {
	vals := hdr.Values(name)
	d.buf = binary.BigEndian.AppendUint64(d.buf, uint64(len(vals)))
	for _, v := range vals {
		d.field(v)
	}
}

// cookie adds the raw values of every cookie named name (in the order sent; see
// eachCookie in cookie.go).
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
