package middleware_test

import (
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

func TestParseKey(t *testing.T) {
	ok := map[string]string{
		"abc":                                  "abc",
		"8e03978e-40d5-43e8-bc93-6894a57f9324": "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`"abc"`:                                "abc",
		`"a b, c"`:                             "a b, c",
		`"q\"uote\\"`:                          `q"uote\`,
		"x;y=1":                                "x;y=1",
		strings.Repeat("a", 255):               strings.Repeat("a", 255),
		`"` + strings.Repeat("a", 255) + `"`:   strings.Repeat("a", 255),
	}
	for in, want := range ok {
		got, err := middleware.ParseKey([]string{in})
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{"", `""`, "a b", "a,b", "é", "\x00", strings.Repeat("a", 256), `"` + strings.Repeat("a", 256) + `"`,
		`"abc`, `"a"b`, `"a\x"`, "\"a\tb\"", `"a";p`, `"a", "b"`}
	for _, in := range bad {
		if got, err := middleware.ParseKey([]string{in}); err == nil {
			t.Errorf("ParseKey(%q) = %q, want an error", in, got)
		}
	}
	if _, err := middleware.ParseKey(nil); err == nil {
		t.Error("no value accepted")
	}
	if _, err := middleware.ParseKey([]string{"a", "a"}); err == nil {
		t.Error("two values accepted")
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "", `""`, "a,b", `"a";x`, "\xff", strings.Repeat("z", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := middleware.ParseKey([]string{v})
		if err != nil {
			return
		}
		if len(key) < 1 || len(key) > middleware.MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: length %d out of 1..255", v, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x is not printable ASCII", v, key, key[i])
			}
		}
		if v[0] != '"' && key != v {
			t.Fatalf("bare value %q parsed to %q", v, key)
		}
	})
}
