package middleware

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// Kept parts are read back from whatever a store returns: every truncation of
// a fingerprint, and bytes that only look like one, read as no parts or as
// parts, never a panic.
func TestFingerprintPartsReadBack(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	p := []byte{partsMark}
	p = appendPart(p, partMethod, "", "POST")
	p = appendPartSum(p, partHeader, "X-Tenant", sum[:])
	p = appendPartSum(p, partBody, "/amount", sum[:])
	p = appendPartSum(p, partMore, "", nil)
	fp := string(sum[:]) + string(p)
	parts, ok := fpParts(fp)
	if !ok || len(parts) != 4 || parts[1].name != "X-Tenant" || parts[2].name != "/amount" || parts[3].kind != partMore {
		t.Fatalf("parts %+v, %v", parts, ok)
	}
	for i := range len(fp) {
		fpParts(fp[:i])
	}
	if _, ok := fpParts(string(sum[:]) + "P\x05\xff\xff\xff\xff\x0f"); ok {
		t.Fatal("a name longer than its fingerprint read as a part")
	}
	if _, ok := fpParts(string(sum[:]) + "P\x05" + "\x81\x01" + strings.Repeat("n", 129) + "12345678"); ok {
		t.Fatal("a name past maxPartName read as a part")
	}
	// Differences: a changed and a removed body part, and a header.
	other := string(sum[:]) + string(appendPartSum(appendPartSum([]byte{partsMark}, partMethod, "", sum[:]), partHeader, "X-Tenant", make([]byte, 8)))
	was, _ := fpParts(fp)
	now, _ := fpParts(other)
	if got := strings.Join(diffParts(was, now), "; "); got != "the method; the header X-Tenant; /amount" {
		t.Fatalf("diff %q", got)
	}
}
