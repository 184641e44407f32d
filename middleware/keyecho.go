package middleware

import (
	"net/http"

	"github.com/idemproxy/idemproxy/cache"
)

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
