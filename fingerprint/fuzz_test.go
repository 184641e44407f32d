package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/idemproxy/idemproxy/fingerprint"
)

// The pointers the fuzz target leaves out.
var fuzzIgnore = []string{"/request_time", "/meta/sent_at", "/items/1"}

// jv is a generated JSON value: kinds o(bject) a(rray) s(tring) n(umber)
// t(rue) f(alse) z (null).
type jv struct {
	kind    byte
	s       string
	n       float64
	members []jm
	elems   []*jv
}

type jm struct {
	name string
	v    *jv
}

var fuzzNames = []string{"a", "b", "request_time", "meta", "sent_at", "items", "A", "é", "€", "😀", "\ufb33", "a/b", "m~0", "", " ", "\u0080", "\r",
	"k", "\u212a", "s", "ſ", "amount", "Amount", "ı"}

func genValue(r *rand.Rand, depth int) *jv {
	k := "sntfz"
	if depth < 4 {
		k = "ooaasntfz"
	}
	v := &jv{kind: k[r.IntN(len(k))]}
	switch v.kind {
	case 'o':
		for _, i := range r.Perm(len(fuzzNames))[:r.IntN(5)] {
			v.members = append(v.members, jm{fuzzNames[i], genValue(r, depth+1)})
		}
	case 'a':
		for range r.IntN(4) {
			v.elems = append(v.elems, genValue(r, depth+1))
		}
	case 's':
		v.s = fuzzNames[r.IntN(len(fuzzNames))] + strconv.Itoa(r.IntN(3))
	case 'n':
		switch r.IntN(4) {
		case 0:
			v.n = float64(r.IntN(2000) - 1000)
		case 1:
			v.n = float64(r.IntN(64)) / 8
		case 2:
			v.n = r.NormFloat64() * 1e6
		default:
			v.n = r.NormFloat64() * 1e-9
		}
	}
	return v
}

// genDoc is an object that uses the ignored pointers' names often.
func genDoc(r *rand.Rand) *jv {
	d := &jv{kind: 'o'}
	for _, i := range r.Perm(len(fuzzNames))[:2+r.IntN(5)] {
		d.members = append(d.members, jm{fuzzNames[i], genValue(r, 1)})
	}
	if r.IntN(2) == 0 {
		d.members = append(d.members, jm{"items", &jv{kind: 'a', elems: []*jv{genValue(r, 2), genValue(r, 2), genValue(r, 2)}}})
	}
	return dedupe(d)
}

// dedupe drops members whose name came twice (the generator's "items").
func dedupe(d *jv) *jv {
	seen := map[string]bool{}
	out := d.members[:0]
	for _, m := range d.members {
		if !seen[m.name] {
			seen[m.name] = true
			out = append(out, m)
		}
	}
	d.members = out
	return d
}

// write serialises v; with r, in a random but equivalent way: members
// shuffled, whitespace, \u escapes, other number forms.
func write(b *strings.Builder, v *jv, r *rand.Rand) {
	ws := func() {
		if r != nil && r.IntN(3) == 0 {
			b.WriteString([]string{" ", "\n", "\t", "\r\n  "}[r.IntN(4)])
		}
	}
	ws()
	switch v.kind {
	case 'o':
		ms := slices.Clone(v.members)
		if r != nil {
			r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		}
		b.WriteByte('{')
		for i, m := range ms {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			writeString(b, m.name, r)
			ws()
			b.WriteByte(':')
			write(b, m.v, r)
		}
		b.WriteByte('}')
	case 'a':
		b.WriteByte('[')
		for i, e := range v.elems {
			if i > 0 {
				b.WriteByte(',')
			}
			write(b, e, r)
		}
		b.WriteByte(']')
	case 's':
		writeString(b, v.s, r)
	case 'n':
		s := strconv.FormatFloat(v.n, 'g', -1, 64)
		if r != nil {
			switch r.IntN(3) {
			case 0:
				s = strconv.FormatFloat(v.n, 'E', -1, 64)
			case 1:
				if !strings.ContainsAny(s, ".eE") {
					s += ".000"
				}
			}
		}
		b.WriteString(s)
	case 't':
		b.WriteString("true")
	case 'f':
		b.WriteString("false")
	case 'z':
		b.WriteString("null")
	}
	ws()
}

func writeString(b *strings.Builder, s string, r *rand.Rand) {
	if r == nil {
		q, _ := json.Marshal(s)
		b.Write(q)
		return
	}
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case r.IntN(3) == 0 || c < 0x20:
			for _, u := range utf16.Encode([]rune{c}) {
				fmt.Fprintf(b, `\u%04X`, u)
			}
		case c == '"' || c == '\\':
			b.WriteString(`\` + string(c))
		case c == '/' && r.IntN(2) == 0:
			b.WriteString(`\/`)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
}

// node is a value of the document and its path.
type node struct {
	v    *jv
	path []string
}

func nodes(v *jv, path []string, out []node) []node {
	out = append(out, node{v, path})
	for _, m := range v.members {
		out = nodes(m.v, append(slices.Clone(path), m.name), out)
	}
	for i, e := range v.elems {
		out = nodes(e, append(slices.Clone(path), strconv.Itoa(i)), out)
	}
	return out
}

func excluded(path []string) bool {
	p := ""
	for _, tok := range path {
		p += "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
		if slices.Contains(fuzzIgnore, p) {
			return true
		}
	}
	return false
}

// mutate changes v into a value that means something else.
func mutate(v *jv) {
	switch v.kind {
	case 'o':
		v.members = append(v.members, jm{"added-member", &jv{kind: 'z'}})
	case 'a':
		v.elems = append(v.elems, &jv{kind: 'z'})
	case 's':
		v.s += "x"
	case 'n':
		if v.n+1 != v.n {
			v.n++
		} else {
			v.kind, v.s = 's', "n"
		}
	case 't':
		v.kind = 'f'
	case 'f':
		v.kind = 't'
	case 'z':
		v.kind, v.n = 'n', 0
	}
}

// folded reports whether an object of v has two member names that fold alike.
func folded(v *jv) bool {
	for i, m := range v.members {
		for _, o := range v.members[:i] {
			if foldsAlike(m.name, o.name) {
				return true
			}
		}
		if folded(m.v) {
			return true
		}
	}
	return slices.ContainsFunc(v.elems, folded)
}

// FuzzJSONFingerprint: a generated document whose objects have names that
// fold alike (case, the Kelvin sign, ı) is refused. Any other and a copy
// serialised anew (members shuffled, whitespace, escapes, number forms) are
// equal, and Go's encoding/json decodes both alike into a struct; after one
// value outside the ignored pointers changes they differ, and after one inside
// them changes they are still equal.
func FuzzJSONFingerprint(f *testing.F) {
	for i := range 16 {
		f.Add(int64(i), uint16(i*7))
	}
	bf, err := fingerprint.NewJSON(fuzzIgnore...)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, seed int64, pick uint16) {
		r := rand.New(rand.NewPCG(uint64(seed), 29))
		d := genDoc(r)
		var plain, again strings.Builder
		write(&plain, d, nil)
		write(&again, d, r)
		da, _, err := digestOf(t, bf, "", plain.String())
		if folded(d) {
			if err == nil || !strings.Contains(err.Error(), "case") {
				t.Fatalf("%s: names that fold alike: %v", plain.String(), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", plain.String(), err)
		}
		db, _, err := digestOf(t, bf, "", again.String())
		if err != nil {
			t.Fatalf("%s: %v", again.String(), err)
		}
		if da != db {
			t.Fatalf("re-serialised document differs:\n%s\n%s", plain.String(), again.String())
		}
		if a, b := structReading([]byte(plain.String())), structReading([]byte(again.String())); a != b {
			t.Fatalf("one fingerprint, two readings by encoding/json:\n%s\n%s\n%s\n%s", plain.String(), again.String(), a, b)
		}
		all := nodes(d, nil, nil)
		n := all[int(pick)%len(all)]
		mutate(n.v)
		var changed strings.Builder
		write(&changed, d, r)
		dc, _, err := digestOf(t, bf, "", changed.String())
		if err != nil {
			t.Fatalf("%s: %v", changed.String(), err)
		}
		if want := excluded(n.path); (dc == da) != want {
			t.Fatalf("value at %q (ignored: %v) changed, equal = %v:\n%s\n%s", n.path, want, dc == da, plain.String(), changed.String())
		}
	})
}

// FuzzCanonicalJSON: what the JSON reading accepts is JSON without names that
// fold alike in an object; its canonical form is JSON with the same value
// (encoding/json's reading, into a map and into a struct, whose fields match
// names case-insensitively) and its own canonical form.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,"\u00e9",null,true]}`, `[1e21,-0,0.1]`, `"x"`, `{"a":{"a":{}}}`, `[1,]`, `{"a":1,"a":2}`,
		`{"amount":100,"Amount":1}`, `{"meta":{"k":1,"\u212a":2}}`, `{"items":[{"s":1},{"\u017f":2,"s":3}]}`, `{"i":1,"\u0131":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := fingerprint.CanonicalJSON(in)
		if err != nil {
			return
		}
		if !json.Valid(in) || !json.Valid(c) {
			t.Fatalf("accepted %q, canonical %q", in, c)
		}
		again, err := fingerprint.CanonicalJSON(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonical form %q is not its own: %q, %v", c, again, err)
		}
		var a, b any
		_ = json.Unmarshal(in, &a)
		_ = json.Unmarshal(c, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%q and its canonical form %q differ: %v, %v", in, c, a, b)
		}
		if foldedNames(in) {
			t.Fatalf("%q accepted with names that fold alike", in)
		}
		if a, b := structReading(in), structReading(c); a != b {
			t.Fatalf("%q and its canonical form %q decode into a struct differently: %s, %s", in, c, a, b)
		}
	})
}

// FuzzFormFingerprint: what the form reading accepts, url.ParseQuery accepts;
// fields reordered (each name's values keeping their order) are the same body
// when no upstream relates their names, and never one fingerprint for two
// bodies some upstream reads differently (Go, case-insensitive readers, PHP,
// Rack: formReaders); one value changed is another body.
func FuzzFormFingerprint(f *testing.F) {
	for _, s := range []string{"a=1&b=2&a=3", "x=%C3%A9+y&&z", "a=1;b=2", "=&=", "k=%zz",
		"amount=100&Amount=1", "k=1&%E2%84%AA=2", "amount.total=1&amount_total=2&amount+total=3&amount%5Btotal=4",
		"a%5B%5D=1&a%5B0%5D=2&a=3", "a%5Bx%5D=1&a%5Bx%5Djunk=2&a%5Bx%5D%5Bjunk%5D=3", "%20a=1&a%00b=2&a=3", "a.b=1&a%5Bb%5D=2&b=3"} {
		f.Add(s, uint64(1))
	}
	bf, _ := fingerprint.NewForm()
	f.Fuzz(func(t *testing.T, body string, seed uint64) {
		d, _, err := digestOf(t, bf, "", body)
		if err != nil {
			return
		}
		if _, err := url.ParseQuery(body); err != nil {
			t.Fatalf("%q accepted, ParseQuery refuses it: %v", body, err)
		}
		var pairs []string
		for _, p := range strings.Split(body, "&") {
			if p != "" {
				pairs = append(pairs, p)
			}
		}
		if len(pairs) == 0 {
			return
		}
		name := func(p string) string { n, _, _ := strings.Cut(p, "="); v, _ := url.QueryUnescape(n); return v }
		r := rand.New(rand.NewPCG(seed, 29))
		moved := slices.Clone(pairs)
		r.Shuffle(len(moved), func(i, j int) { moved[i], moved[j] = moved[j], moved[i] })
		slices.SortStableFunc(moved, func(a, b string) int { return strings.Compare(name(a), name(b)) })
		// moved sorts by name, and within a name keeps the shuffled order:
		// put each name's values back in their order.
		byName := map[string][]string{}
		for _, p := range pairs {
			byName[name(p)] = append(byName[name(p)], p)
		}
		for i := 0; i < len(moved); {
			n := name(moved[i])
			copy(moved[i:], byName[n])
			i += len(byName[n])
		}
		simple := !slices.ContainsFunc(pairs, func(p string) bool {
			return strings.ContainsFunc(name(p), func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') })
		})
		d2, _, err := digestOf(t, bf, "", strings.Join(moved, "&"))
		if err != nil || simple && d2 != d {
			t.Fatalf("%q reordered as %q: %v, equal %v", body, strings.Join(moved, "&"), err, d2 == d)
		}
		// Any order that keeps each name's values in theirs: one fingerprint
		// only if every reader reads it as the body.
		shuffled := slices.Clone(pairs)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		next := map[string]int{}
		for i, p := range shuffled {
			n := name(p)
			shuffled[i] = byName[n][next[n]]
			next[n]++
		}
		for _, other := range [][]string{moved, shuffled} {
			o := strings.Join(other, "&")
			if d3, _, err := digestOf(t, bf, "", o); err == nil && d3 == d {
				if reader := formReadingsDiffer(body, o); reader != "" {
					t.Fatalf("%q and %q: one fingerprint, read differently by %s", body, o, reader)
				}
			}
		}
		i := r.IntN(len(pairs))
		changed := slices.Clone(pairs)
		changed[i] += map[bool]string{true: "x", false: "=x"}[strings.Contains(pairs[i], "=")]
		if d3, _, err := digestOf(t, bf, "", strings.Join(changed, "&")); err != nil || d3 == d {
			t.Fatalf("%q changed as %q: %v, equal %v", body, strings.Join(changed, "&"), err, d3 == d)
		}
	})
}
