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
	// Every byte value at every position: a key is its bytes exactly when
	// each of its bytes is a lower-case hex digit.
	for pos := range hexKey {
		for c := range 256 {
			k := []byte(hexKey)
			k[pos] = byte(c)
			want := ikey(sha256.Sum256(k))
			if c >= '0' && c <= '9' || c >= 'a' && c <= 'f' {
				b, _ := hex.DecodeString(string(k))
				want = ikey(b)
			}
			if got := internKey(string(k)); got != want {
				t.Fatalf("byte %#x at %d: %x; want %x", c, pos, got, want)
			}
		}
	}
	// The odd last digit of a listing's key prefix, likewise.
	for c := range 256 {
		isHex := c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
		if kp := newKeyPrefix("ab" + string([]byte{byte(c)})); kp.none == isHex {
			t.Fatalf("newKeyPrefix with the odd digit %#x: none=%v", c, kp.none)
		}
	}
	for _, k := range []string{"", "abc", hexKey[:63], hexKey + "0", strings.ToUpper(hexKey)} {
		if got, want := internKey(k), ikey(sha256.Sum256([]byte(k))); got != want {
			t.Fatalf("internKey(%q) = %x; want its digest", k, got)
		}
	}
}
