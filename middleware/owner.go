package middleware

import (
	"encoding/hex"
	"net/http"
)

// ownerDomain keeps an owner digest apart from every store key: both hash the
// scope, and only the store key goes on to hash the client's key.
const ownerDomain = "idemproxy owner"

// owner returns the client scope a request's records belong to, as
// cache.Lock.Owner: 16 hex digits of a SHA-256 of exactly the scope the store
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
