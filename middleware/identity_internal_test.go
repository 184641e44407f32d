package middleware

import (
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache/memstore"
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

// The scope's cookie parser keeps every value of the named cookie raw, in order,
// across Cookie lines, where net/http's drops some or all of them.
func TestEachCookieIsRaw(t *testing.T) {
	many := strings.Repeat("x=1; ", 5000)
	for _, c := range []struct {
		lines []string
		want  []string
	}{
		{[]string{"session=abc"}, []string{"abc"}},
		{[]string{`session="a\054b"`}, []string{`"a\054b"`}},
		{[]string{"session=caf\u00e9"}, []string{"caf\u00e9"}},
		{[]string{`session=a"b\c`}, []string{`a"b\c`}},
		{[]string{many + "session=last"}, []string{"last"}},
		{[]string{"a=1;session=one ;  b=2; session=two", "\tsession = three\t", "session=four"}, []string{"one", "two", "three", "four"}},
		{[]string{"session=", "session"}, []string{""}}, // a pair with an empty value counts; a bare name is no pair
		{[]string{"sessionx=1; Session=2; xsession=3; ; ;"}, nil},
		{[]string{"session=a=b"}, []string{"a=b"}},
		{nil, nil},
	} {
		var got []string
		eachCookie(c.lines, "session", func(v string) { got = append(got, v) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%.60q: got %q, want %q", c.lines, got, c.want)
		}
	}
}

// Two requests whose session cookies differ only where net/http's parser drops
// them get different store keys; where they differ only in whitespace around
// the pair, or in other cookies, the same one.
func TestCookieScopeStoreKeys(t *testing.T) {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h, err := New(store, func(s *Settings) { s.ScopeHeaders = []string{"Cookie:session"} })
	if err != nil {
		t.Fatal(err)
	}
	key := func(lines ...string) string {
		r, _ := http.NewRequest(http.MethodPost, "http://api.example/pay", nil)
		r.Header["Cookie"] = lines
		return h.StoreKey(r, "k")
	}
	many := strings.Repeat("x=1; ", 3001)
	for _, pair := range [][2][]string{
		{{`session="a\054b"`}, {`session="a\054c"`}},
		{{"session=caf\u00e9-1"}, {"session=caf\u00e9-2"}},
		{{many + "session=a"}, {many + "session=b"}},
		{{"session=a"}, {"session=a; session=a"}},
		{{"session=a"}, {}},
	} {
		if key(pair[0]...) == key(pair[1]...) {
			t.Errorf("%.40q and %.40q share a scope", pair[0], pair[1])
		}
	}
	for _, pair := range [][2][]string{
		{{"session=a; theme=dark"}, {"theme=light;session=a"}},
		{{"session=a", "session=b"}, {"session=a; session=b"}},
		{{" session = a "}, {"session=a"}},
	} {
		if key(pair[0]...) != key(pair[1]...) {
			t.Errorf("%q and %q are the same session in different scopes", pair[0], pair[1])
		}
	}
}
