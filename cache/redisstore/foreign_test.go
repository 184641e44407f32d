package redisstore

import (
	"strings"
	"testing"
)

// TestForeignKeys: what follows a prefix in a key SCAN matched is another
// store's record when it reads as the middleware's key (64 hex digits) after
// a prefix that nests with this one, longer or shorter. The shorter case is
// a record of prefix a* whose hash begins with b, seen by prefix a*b
// (TestPrefixesListTheirOwn met it once in 16 runs: a random hash).
func TestForeignKeys(t *testing.T) {
	hash := "b" + strings.Repeat("f", 63)
	for _, c := range []struct {
		prefix, rest string
		foreign      bool
	}{
		{"idem:", hash, false},                 // its own record
		{"idem:", "eu:" + hash, true},          // idem:eu:'s record
		{"a*b", hash[1:], true},                // a*'s record a*bfff…
		{"a*bb", hash[2:], true},               // a*'s record a*bbff…
		{"a*b", hash[2:], false},               // 62 hex digits after a*b: no prefix a makes 64 ("*b" is no hex)
		{"idem:", hash[1:], false},             // 63 hex digits after a prefix ending in ':'
		{"xab", strings.Repeat("0", 62), true}, // x's record xab00…
		{"idem:", "busy", false},               // a key of a Go program's own
		{"idem:", "eu:x", false},               // likewise (documented: also idem:eu:'s x)
		{"idem:", strings.Repeat("g", 65), false},
	} {
		if got := foreign(c.prefix, c.rest); got != c.foreign {
			t.Errorf("foreign(%q, %q) = %v, want %v", c.prefix, c.rest, got, c.foreign)
		}
	}
}
