package proxy

// The request id every request line logs and every request upstream carries
// (request_id_header).

import (
	crand "crypto/rand"
	"math/rand/v2"
	"sync"
)

// maxRequestID bounds a request id taken from a trusted proxy.
const maxRequestID = 128

// A request id is 26 characters of the base32 alphabet (A–Z, 2–7), 130 random
// bits: the form crypto/rand.Text gives, which the proxy used before. Drawn
// from the operating system per request, those bits cost a getrandom call
// each (0.1 µs or so through the vDSO of Linux 6.11 and later, 0.5 µs as the
// system call of earlier kernels); they now come from a pool of ChaCha8
// generators, each seeded with 32 bytes of crypto/rand when the pool makes it
// (at start, and again when a garbage collection has emptied the pool): a
// little less than the vDSO call, in user space (BENCHMARKS.md, issue 27).
//
// What a request id needs is that it cannot be predicted or counted (a
// counter would tell the request volume, and a guessable id could be planted
// in someone else's trail) and that it does not repeat, across processes and
// restarts too. It is no secret: nothing is authorised by it. math/rand/v2's
// ChaCha8 is documented as a cryptographically strong generator (the one the
// Go runtime itself uses), rekeying itself from its own output every
// kilobyte, so that a memory dump tells at most the last few dozen ids of a
// generator (which the logs hold anyway): with a secret 256-bit seed per
// generator, an id tells nothing of any other, and two ids repeat only by a
// 130-bit coincidence. (The package as a whole warns against
// security-sensitive use; ChaCha8 is the generator it documents as
// cryptographically strong. Its top-level functions are not used: their
// source is not documented as such, and is shared with the whole process.) A
// generator serves one request at a time, without a claim; the pool keeps one
// per busy goroutine rather than one per request.
var idSources = sync.Pool{New: func() any {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails (it aborts the process instead)
	return rand.NewChaCha8(seed)
}}

const base32Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// requestIDLen characters of 5 bits: ⌈128/5⌉, as crypto/rand.Text.
const requestIDLen = 26

func newRequestID() string {
	var b [requestIDLen]byte
	src := idSources.Get().(*rand.ChaCha8)
	_, _ = src.Read(b[:])
	idSources.Put(src)
	for i := range b {
		b[i] = base32Alphabet[b[i]%32] // 256 is a multiple of 32: uniform
	}
	return string(b[:])
}

// validRequestID: 1 to maxRequestID visible ASCII characters, none of which
// would need quoting in a log line or a header list.
func validRequestID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == ',' || c == ';' {
			return false
		}
	}
	return true
}
