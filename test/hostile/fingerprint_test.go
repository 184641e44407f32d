package hostile_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

const canonical = `max_request_body: 1MiB
routes:
  - path: /orders
    fingerprint: json
    fingerprint_ignore: [/request_time]
  - path: /form
    fingerprint: form
`

// order is a document and the same document written anew: members shuffled,
// other whitespace, characters escaped, numbers in another form, another
// request_time.
func order(r *rand.Rand, n int) (doc, again string, members []string) {
	type m struct{ name, a, b string }
	ms := []m{{"request_time", `"t1"`, `"t2"`}}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		switch r.IntN(3) {
		case 0:
			v := r.IntN(1000)
			ms = append(ms, m{name, fmt.Sprint(v), fmt.Sprintf("%d.0e0", v)})
		case 1:
			ms = append(ms, m{name, `"café"`, `"caf\u00e9"`})
		default:
			ms = append(ms, m{name, `{"x":[1,2],"y":null}`, "{ \"y\" : null ,\n\"x\" : [ 1 , 2 ] }"})
		}
		members = append(members, name)
	}
	write := func(second bool) string {
		out := make([]string, len(ms))
		for i, x := range ms {
			v := x.a
			if second {
				v = x.b
			}
			out[i] = fmt.Sprintf("%q:%s", x.name, v)
		}
		if second {
			r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
			return "{\n  " + strings.Join(out, ",\n  ") + "\n}"
		}
		return "{" + strings.Join(out, ",") + "}"
	}
	return write(false), write(true), members
}

// A JSON retry written anew replays; one with a member changed gets 422 naming
// the member and never its value; bodies that read two ways, or past the
// bounds, are 400 in bounded time and never forwarded.
func TestHostileCanonicalBodies(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, canonical)
	for i := range 20 {
		op := fmt.Sprintf("order-%d", i)
		doc, again, members := order(r, 1+r.IntN(8))
		h := map[string]string{"X-Op": op, "Idempotency-Key": op}
		first := p.Send(t, req{Target: "/orders", Host: "api.example", Body: doc, Header: h})
		retry := p.Send(t, req{Target: "/orders", Host: "api.example", Body: again, Header: h})
		if first.Status != 201 || !retry.Replayed || up.Count(op) != 1 {
			t.Fatalf("%s then %s: %d / %d %s (ran %d)", doc, again, first.Status, retry.Status, retry.Body, up.Count(op))
		}
		target := members[r.IntN(len(members))]
		changed := strings.Replace(doc, fmt.Sprintf("%q:", target), fmt.Sprintf("%q:\"secret-%d\",\"_\":", target, i), 1)
		a := p.Send(t, req{Target: "/orders", Host: "api.example", Body: changed, Header: h})
		var prob struct{ Detail string }
		_ = json.Unmarshal([]byte(a.Body), &prob)
		if a.Status != 422 || !strings.Contains(prob.Detail, "/"+target) || strings.Contains(a.Body, "secret") || up.Count(op) != 1 {
			t.Fatalf("changed /%s: %d %s", target, a.Status, a.Body)
		}
	}
	before := up.Total()
	long := strings.Repeat("n", 4000)
	var names strings.Builder
	for i := 0; names.Len() < 900<<10; i++ {
		fmt.Fprintf(&names, `"%s%07d":0,`, long, i)
	}
	for _, c := range []struct{ name, body, want string }{
		{"a name twice", `{"a":1,"a":2}`, "twice"},
		{"a name twice, escaped", `{"amount":1,"\u0061mount":2}`, "twice"},
		{"an integer past a double", `{"id":12345678901234567890}`, "does not hold exactly"},
		{"a lone surrogate", `{"s":"\ud800"}`, "surrogate"},
		{"invalid UTF-8", "{\"s\":\"\xc3\x28\"}", "UTF-8"},
		{"nested past 64", strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), "deeper"},
		{"values past 131072", "[" + strings.Repeat("0,", 140000) + "0]", "more than"},
		{"long names sharing a prefix", "{" + names.String() + `"a":1,"a":2}`, "twice"},
	} {
		began := time.Now()
		a := p.Send(t, req{Target: "/orders", Host: "api.example", Body: c.body, Header: map[string]string{"Idempotency-Key": "bad", "X-Op": "bad"}})
		if a.Status != 400 || !strings.Contains(a.Body, "body-malformed") || !strings.Contains(a.Body, c.want) {
			t.Fatalf("%s: %d %.300s", c.name, a.Status, a.Body)
		}
		if took := time.Since(began); took > 3*time.Second {
			t.Fatalf("%s: answered after %v", c.name, took)
		}
	}
	for _, form := range []string{"a=1;b=2", "a=%zz"} {
		if a := p.Send(t, req{Target: "/form", Host: "api.example", Body: form, Header: map[string]string{"Idempotency-Key": "f", "X-Op": "bad"}}); a.Status != 400 {
			t.Fatalf("form %q: %d %s", form, a.Status, a.Body)
		}
	}
	if n := up.Total() - before; n != 0 {
		t.Fatalf("%d refused bodies reached the upstream", n)
	}
}

// spell writes name as a reader that ignores case still reads it: letters in
// random case, k as the Kelvin sign, s as the long s, i as the dotless i (which
// .NET and Java read as I).
func spell(r *rand.Rand, name string) string {
	var b strings.Builder
	for _, c := range name {
		switch {
		case c == 'k' && r.IntN(3) == 0:
			b.WriteRune('\u212a')
		case c == 's' && r.IntN(3) == 0:
			b.WriteRune('ſ')
		case c == 'i' && r.IntN(3) == 0:
			b.WriteRune('ı')
		case r.IntN(2) == 0:
			b.WriteString(strings.ToUpper(string(c)))
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// Names an upstream reads as one, chosen by the client: a JSON object with two
// such members, at any depth, is 400 and never forwarded (Go's encoding/json
// would bind one or the other by their order); a form with two such fields
// (case, PHP's "." and " " for "_", an unclosed "["), sent in the other order,
// is 422, never a replay of the first, while unrelated fields still move.
func TestHostileFoldedNames(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, canonical)
	bases := []string{"amount", "status", "risk_id", "skip", "kind", "is_test"}
	before := up.Total()
	for i := range 20 {
		base := bases[r.IntN(len(bases))]
		other := spell(r, base)
		for other == base {
			other = spell(r, base)
		}
		pair := fmt.Sprintf(`%q:"secret-a",%q:"secret-b"`, base, other)
		if r.IntN(2) == 0 {
			pair = fmt.Sprintf(`%q:"secret-b",%q:"secret-a"`, other, base)
		}
		doc := "{" + pair + `,"n":1}`
		for range r.IntN(4) {
			doc = fmt.Sprintf(`{"request_time":"t","wrap":[0,%s]}`, doc)
		}
		h := map[string]string{"Idempotency-Key": fmt.Sprintf("fold-%d", i), "X-Op": "bad"}
		a := p.Send(t, req{Target: "/orders", Host: "api.example", Body: doc, Header: h})
		if a.Status != 400 || !strings.Contains(a.Body, "body-malformed") || !strings.Contains(a.Body, "case") || strings.Contains(a.Body, "secret") {
			t.Fatalf("%s: %d %s", doc, a.Status, a.Body)
		}
	}
	if n := up.Total() - before; n != 0 {
		t.Fatalf("%d bodies with names that fold alike reached the upstream", n)
	}
	php := func(name string) string {
		out := []byte(name)
		for j := range out {
			if out[j] == '_' {
				out[j] = " .["[r.IntN(3)]
			}
		}
		if r.IntN(4) == 0 {
			out = append([]byte{' '}, out...)
		}
		return string(out)
	}
	for i := range 20 {
		base := bases[r.IntN(len(bases))]
		other := spell(r, base)
		if strings.Contains(base, "_") && r.IntN(2) == 0 {
			other = php(base)
		}
		for other == base {
			other = spell(r, base)
		}
		esc := func(n, v string) string { return url.QueryEscape(n) + "=" + v }
		rest := []string{esc("currency", "EUR"), esc("card_number", "4242")}
		a := strings.Join(append([]string{esc(base, "100"), esc(other, "1")}, rest...), "&")
		b := strings.Join(append(slices.Clone(rest), esc(other, "1"), esc(base, "100")), "&")
		moved := strings.Join(append(slices.Clone(rest[1:]), esc(base, "100"), rest[0], esc(other, "1")), "&")
		op := fmt.Sprintf("form-fold-%d", i)
		h := map[string]string{"Idempotency-Key": op, "X-Op": op, "Content-Type": "application/x-www-form-urlencoded"}
		first := p.Send(t, req{Target: "/form", Host: "api.example", Body: a, Header: h})
		again := p.Send(t, req{Target: "/form", Host: "api.example", Body: moved, Header: h})
		swapped := p.Send(t, req{Target: "/form", Host: "api.example", Body: b, Header: h})
		if first.Status != 201 || !again.Replayed || swapped.Status != 422 || swapped.Replayed || up.Count(op) != 1 {
			t.Fatalf("%s, then %s: %d %s, then %s: %d %s (ran %d)", a, moved, again.Status, again.Body, b, swapped.Status, swapped.Body, up.Count(op))
		}
	}
}
