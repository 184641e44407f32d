package fold

import (
	"bytes"
	"testing"
	"unicode"
)

// Over every rune: runes Go's bytes.EqualFold takes as equal (encoding/json's
// struct match), runes with one upper case (.NET) and runes whose upper cases
// have one lower case (Java) fold alike; beyond Go's orbits only ı and İ are
// merged; the representative is its own.
func TestRuneCoversTheReaders(t *testing.T) {
	extra := map[rune]bool{}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		if unicode.SimpleFold(r) == r && unicode.ToUpper(r) == r && unicode.ToLower(r) == r {
			if Rune(r) != r {
				t.Fatalf("%U has no case, folds to %U", r, Rune(r))
			}
			continue
		}
		k := Rune(r)
		if Rune(k) != k {
			t.Fatalf("%U: representative %U is not its own", r, k)
		}
		for s := unicode.SimpleFold(r); s != r; s = unicode.SimpleFold(s) {
			if !bytes.EqualFold([]byte(string(r)), []byte(string(s))) {
				t.Fatalf("%U %U: not EqualFold", r, s)
			}
			if Rune(s) != k {
				t.Fatalf("%U and %U: Go folds them together, Rune does not (%U, %U)", r, s, k, Rune(s))
			}
		}
		if u := unicode.ToUpper(r); Rune(u) != k {
			t.Fatalf("%U and its upper case %U fold apart", r, u)
		}
		if l := unicode.ToLower(unicode.ToUpper(r)); Rune(l) != k {
			t.Fatalf("%U and %U fold apart", r, l)
		}
		if m := orbitMin(r); m != k {
			extra[r] = true
		}
	}
	if len(extra) != 2 || !extra['ı'] || !extra['İ'] {
		t.Fatalf("merged beyond Go's orbits: %v", extra)
	}
}

func orbitMin(r rune) rune {
	m := r
	for s := unicode.SimpleFold(r); s != r; s = unicode.SimpleFold(s) {
		m = min(m, s)
	}
	return m
}

func TestAppend(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"amount", "AMOUNT"}, {"k", "\u212a"}, {"status", "ſtatus"}, {"id", "ıd"}, {"id", "İD"},
		{"σς", "ΣΣ"}, {"a\xffb", "A\xffB"},
	} {
		if string(Append(nil, c.a)) != string(Append(nil, c.b)) || !Equal(c.a, c.b) || !Equal([]byte(c.b), []byte(c.a)) {
			t.Errorf("%q and %q fold apart: %q %q", c.a, c.b, Append(nil, c.a), Append(nil, c.b))
		}
	}
	for _, c := range []struct{ a, b string }{
		{"a_b", "ab"}, {"straße", "STRASSE"}, {"é", "e"}, {"a\xffb", "a\xfeb"}, {"a\xffb", "a\uFFFDb"},
	} {
		if string(Append(nil, c.a)) == string(Append(nil, c.b)) || Equal(c.a, c.b) || Equal(c.b+"x", c.a) {
			t.Errorf("%q and %q fold alike", c.a, c.b)
		}
	}
	if got := string(Append(nil, "Ab_c-é")); got != "AB_C-"+string(Rune('é')) {
		t.Errorf("%q", got)
	}
	if Equal("ab", "a") || Equal("a", "ab") || !Equal("", "") {
		t.Error("lengths")
	}
}

func TestPlain(t *testing.T) {
	for s, want := range map[string]bool{"amount_total": true, "a-b.c[0]": true, "": true, "Amount": false, "é": false, "\u212a": false} {
		if Plain([]byte(s)) != want {
			t.Errorf("Plain(%q) = %v", s, !want)
		}
	}
	// Two different plain names never fold alike.
	for _, a := range []string{"a", "b", "ab", "a_b", "z9"} {
		for _, b := range []string{"a", "b", "ab", "a_b", "z9"} {
			if (a == b) != (string(Append(nil, a)) == string(Append(nil, b))) {
				t.Errorf("%q %q", a, b)
			}
		}
	}
}
