package memstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// A store key of 64 lower-case hex digits is its own 32 bytes; anything else
// (upper case, another byte anywhere, another length) is hashed, so that it
// can never collide with a hex key's bytes.
func TestInternKey(t *testing.T) {
	sum := sha256.Sum256([]byte("k"))
	hexKey := hex.EncodeToString(sum[:])
	if got := internKey(hexKey); got != ikey(sum) {
		t.Fatalf("internKey(%s) = %x; want its bytes", hexKey, got)
	}
	for i := range hexKey {
		for _, c := range []byte{'A', 'F', 'g', '/', ':', '`', 0, 0xff} {
			k := hexKey[:i] + string(c) + hexKey[i+1:]
			if got, want := internKey(k), ikey(sha256.Sum256([]byte(k))); got != want {
				t.Fatalf("internKey with %q at %d = %x; want its digest %x", c, i, got, want)
			}
		}
	}
	for _, k := range []string{"", "abc", hexKey[:63], hexKey + "0", strings.ToUpper(hexKey)} {
		if got, want := internKey(k), ikey(sha256.Sum256([]byte(k))); got != want {
			t.Fatalf("internKey(%q) = %x; want its digest", k, got)
		}
	}
}
