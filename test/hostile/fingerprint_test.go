package hostile_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
