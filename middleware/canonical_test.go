package middleware

import (
	"errors"
	"net/http/httptest"
	"path"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache/memstore"
)

func TestCanonicalMethod(t *testing.T) {
	for in, want := range map[string]string{
		"POST": "POST", "post": "POST", "Post": "POST", "pAtCh": "PATCH", "get": "GET",
		"PURGE": "PURGE", "purge": "purge", "": "", "POST ": "POST ",
	} {
		if got := standardMethod(in); got != want {
			t.Errorf("standardMethod(%q) = %q, want %q", in, got, want)
		}
	}
	// A tracked custom method is upper-cased too.
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h, err := New(store, func(s *Settings) { s.Methods = []string{"POST", "PURGE"} })
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"purge", "Purge", "post"} {
		if !h.Tracked(m) {
			t.Errorf("Tracked(%q) = false", m)
		}
	}
	if h.Tracked("get") || h.Tracked("PATCH") {
		t.Error("untracked methods reported tracked")
	}
}

func TestCanonicalPath(t *testing.T) {
	ok := []struct{ in, path, route string }{
		{"", "/", "/"},
		{"/", "/", "/"},
		{"/charges", "/charges", "/charges"},
		{"/charges/", "/charges/", "/charges/"},
		{"/CHARGES/Ch_1", "/CHARGES/Ch_1", "/charges/ch_1"},
		{"/ch%61rges", "/charges", "/charges"},
		{"/a%7eb%2dc", "/a~b-c", "/a~b-c"},
		{"/a%3ab", "/a%3Ab", "/a:b"},
		{"/charges;v=1", "/charges;v=1", "/charges"},
		{"/charges;jsessionid=x/ch_1", "/charges;jsessionid=x/ch_1", "/charges/ch_1"},
		{"/a%3Bb", "/a%3Bb", "/a"},
		{"/caf%C3%A9", "/caf%C3%A9", "/café"},
		{"/CAF%C3%89", "/CAF%C3%89", "/café"},
		// Letters whose upper case is an ASCII letter's: ſ is s, ı is i, the
		// Kelvin sign k, İ i (as re.IGNORECASE, /iu and equalsIgnoreCase read them).
		{"/charge%C5%BF", "/charge%C5%BF", "/charges"},
		{"/str%C4%B1pe", "/str%C4%B1pe", "/stripe"},
		{"/lin%E2%84%AAs", "/lin%E2%84%AAs", "/links"},
		{"/STR%C4%B0PE", "/STR%C4%B0PE", "/stripe"},
		{"/%CF%82", "/%CF%82", "/σ"},
		{"/x.y/.well-known", "/x.y/.well-known", "/x.y/.well-known"},
		{"/charges.", "/charges.", "/charges"},
		{"/charges%20", "/charges%20", "/charges"},
		{"/v1.0/x", "/v1.0/x", "/v1.0/x"},
		{"/a+b", "/a+b", "/a+b"},
	}
	for _, c := range ok {
		p, r, err := CanonicalPath(c.in)
		if err != nil || p != c.path || r != c.route {
			t.Errorf("CanonicalPath(%q) = %q, %q, %v; want %q, %q", c.in, p, r, err, c.path, c.route)
		}
	}
	bad := []string{
		"//charges", "/charges//x", "/./charges", "/a/..", "/a/../b", "/internal/..;/charges",
		"/internal/..;x=1/charges", "/internal/.;/charges", "/internal/%2e%2e/charges", "/internal/%2E./charges",
		"/a%2Fb", "/a%2fb", "/a%5Cb", `/a\b`, "/a%00b", "/a%0Ab", "/a%7Fb", "/a%zz", "/a%4", "charges", "/a/%2e",
		"/a/.%2e;x", "/a/...", "/a/..%20/b", "/a/.%20", "/a/%2E%2E%2E/b", "/a/.%20.;x/b",
	}
	for _, in := range bad {
		if p, r, err := CanonicalPath(in); !errors.Is(err, ErrNonCanonicalPath) {
			t.Errorf("CanonicalPath(%q) = %q, %q, %v; want ErrNonCanonicalPath", in, p, r, err)
		}
	}
}

func TestNonCanonicalPathProblemSuggests(t *testing.T) {
	for in, want := range map[string]string{
		"/internal/../charges":  "send it as /charges",
		"//charges":             "send it as /charges",
		"/internal/..;/charges": "send it as /charges",
		"/charges/./":           "send it as /charges/",
	} {
		_, _, err := CanonicalPath(in)
		if p := NonCanonicalPathProblem(in, err); p.Status != 400 || !strings.Contains(p.Detail, want) {
			t.Errorf("%s: %+v; want a detail with %q", in, p, want)
		}
	}
	_, _, err := CanonicalPath("/a%2Fb")
	if p := NonCanonicalPathProblem("/a%2Fb", err); strings.Contains(p.Detail, "send it as") {
		t.Errorf("an encoded slash has no canonical spelling to suggest: %q", p.Detail)
	}
}

func TestCanonicalHost(t *testing.T) {
	ok := map[string]string{
		"":                       "",
		"api.example":            "api.example",
		"API.Example":            "api.example",
		"api.example.":           "api.example",
		"api.example:80":         "api.example",
		"api.example:443":        "api.example",
		"api.example:":           "api.example",
		"Api.Example.:443":       "api.example",
		"api.example:8080":       "api.example:8080",
		"api.example:08080":      "api.example:8080",
		"127.0.0.1:8080":         "127.0.0.1:8080",
		"127.0.0.1:80":           "127.0.0.1",
		"[::1]:8080":             "[::1]:8080",
		"[0:0:0:0:0:0:0:1]":      "[::1]",
		"[2001:DB8::1]:443":      "[2001:db8::1]",
		"bücher.example":         "xn--bcher-kva.example",
		"BÜCHER.example":         "xn--bcher-kva.example",
		"xn--bcher-kva.example":  "xn--bcher-kva.example",
		"under_score.internal":   "under_score.internal",
		"localhost":              "localhost",
		"LOCALHOST:443":          "localhost",
		"a-b.c-d.example":        "a-b.c-d.example",
		"ends-with-digit1.test2": "ends-with-digit1.test2",
	}
	for in, want := range ok {
		got, err := CanonicalHost(in)
		if err != nil || got != want {
			t.Errorf("CanonicalHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"api..example", ".api.example", "api example", "api.example:http", "api.example:65536",
		"[::1", "[::1]x", "[1.2.3.4]", "::1", "a/b", "a%2eb", "[fe80::1%25eth0]", strings.Repeat("a", 64) + ".example",
		"api.example..", ":80"} {
		if got, err := CanonicalHost(in); !errors.Is(err, ErrInvalidHost) {
			t.Errorf("CanonicalHost(%q) = %q, %v; want ErrInvalidHost", in, got, err)
		}
	}
}

func TestCanonicalize(t *testing.T) {
	r := httptest.NewRequest("post", "http://API.Example:80/Charges;v=1/%7Ex?a=1", nil)
	c, err := Canonicalize(r)
	if err != nil {
		t.Fatal(err)
	}
	want := Canonical{Method: "POST", Path: "/Charges;v=1/~x", Route: "/charges/~x", Host: "api.example"}
	if c != want {
		t.Fatalf("Canonicalize = %+v, want %+v", c, want)
	}
	if r.Method != "post" {
		t.Fatal("Canonicalize changed the request")
	}
}

// FuzzCanonicalRequest: the canonical forms never panic, are fixed points, and
// an accepted path's route form has no segment a server could resolve to
// another path.
func FuzzCanonicalRequest(f *testing.F) {
	for _, s := range []string{"/charges", "/internal/..;/charges", "/a%2Fb", "/ch%61rges;v=1/", "//x", "/CAF%C3%89",
		"/%2e%2e", "/a;b/c;d", "/.well-known/x", "/a%zz"} {
		f.Add(s, "api.example")
	}
	for _, h := range []string{"API.example.:443", "[::1]:80", "bücher.example", "a..b", "x:65535", "[2001:DB8::1]"} {
		f.Add("/", h)
	}
	f.Fuzz(func(t *testing.T, p, host string) {
		cp, route, err := CanonicalPath(p)
		if err == nil {
			cp2, route2, err2 := CanonicalPath(cp)
			if err2 != nil || cp2 != cp || route2 != route {
				t.Fatalf("CanonicalPath(%q) = %q, %q, but CanonicalPath of that = %q, %q, %v", p, cp, route, cp2, route2, err2)
			}
			if route != strings.ToLower(route) || route != foldCase(route) {
				t.Fatalf("route %q of %q is not lower case, or not folded", route, p)
			}
			segs := strings.Split(route[1:], "/")
			for i, s := range segs {
				if s == "." || s == ".." || s == "" && i != len(segs)-1 || strings.ContainsAny(s, "\\\x00") {
					t.Fatalf("route %q of %q has segment %q", route, p, s)
				}
			}
			if c := path.Clean(route); c != strings.TrimSuffix(route, "/") && !(route == "/" && c == "/") {
				t.Fatalf("route %q of %q cleans to %q", route, p, c)
			}
		} else if !errors.Is(err, ErrNonCanonicalPath) {
			t.Fatalf("CanonicalPath(%q): %v is not ErrNonCanonicalPath", p, err)
		}
		ch, err := CanonicalHost(host)
		if err == nil {
			ch2, err2 := CanonicalHost(ch)
			if err2 != nil || ch2 != ch {
				t.Fatalf("CanonicalHost(%q) = %q, but CanonicalHost of that = %q, %v", host, ch, ch2, err2)
			}
			if strings.ContainsAny(ch, "/ \t\r\n") || ch != strings.ToLower(ch) {
				t.Fatalf("CanonicalHost(%q) = %q", host, ch)
			}
		} else if !errors.Is(err, ErrInvalidHost) {
			t.Fatalf("CanonicalHost(%q): %v is not ErrInvalidHost", host, err)
		}
	})
}
