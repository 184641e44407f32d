package cache_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
)

// nested is a stored response whose unknown field "z" holds depth nested
// one-element arrays (or maps).
func nested(depth int, mapLevel bool) []byte {
	var b bytes.Buffer
	b.Write([]byte{0x82, 0xa1, 's', 0xcc, 200, 0xa1, 'z'})
	for range depth {
		if mapLevel {
			b.Write([]byte{0x81, 0xa1, 'k'}) // {"k": …}
		} else {
			b.WriteByte(0x91) // [ … ]
		}
	}
	b.WriteByte(0xc0) // nil at the bottom
	return b.Bytes()
}

// A stored value cannot crash the process: deep nesting in an unknown field is
// ErrCorrupt, not a stack overflow (which recover cannot catch).
func TestDeepNestingIsCorruptNotFatal(t *testing.T) {
	for _, mapLevel := range []bool{false, true} {
		if _, err := cache.DecodeResponse(nested(20_000_000, mapLevel)); !errors.Is(err, cache.ErrCorrupt) {
			t.Errorf("maps %v: err = %v, want ErrCorrupt", mapLevel, err)
		}
	}
	// Shallow nesting in an unknown field is a newer writer's data: skipped.
	if resp, err := cache.DecodeResponse(nested(8, false)); err != nil || resp.Status != 200 {
		t.Fatalf("shallow unknown field: %+v, %v", resp, err)
	}
}
