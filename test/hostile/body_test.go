package hostile_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// bodies bounds what a client may make the proxy hold: 64 KiB a request, 1 MiB
// at once, a second to send it.
const bodies = `max_request_body: 64KiB
body_budget: 1MiB
body_read_timeout: 1s
routes:
  - path: /json
    key_source: json:/data/id
    require_key: true
  - path: /form
    key_source: form:id
    require_key: true
`

// Sizes: a body up to the limit runs, one byte over is 413 and never
// forwarded, and a declared length over it is refused before it is sent.
func TestHostileSizes(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, bodies)
	const limit = 64 << 10
	for i := range 30 {
		n := r.IntN(2 * limit)
		if i == 0 {
			n = limit
		} else if i == 1 {
			n = limit + 1
		}
		op := fmt.Sprintf("size-%d", i)
		a := p.Send(t, req{Method: "POST", Target: "/charges", Host: "api.example", Body: strings.Repeat("x", n),
			Header: map[string]string{"Idempotency-Key": op, "X-Op": op}})
		switch {
		case n <= limit && (a.Status != 201 || up.Count(op) != 1):
			t.Fatalf("%d bytes: %d %s (ran %d); want 201", n, a.Status, a.Body, up.Count(op))
		case n > limit && (a.Status != 413 || up.Count(op) != 0):
			t.Fatalf("%d bytes: %d %s (ran %d); want 413, not forwarded", n, a.Status, a.Body, up.Count(op))
		}
	}
	out := raw(t, p, "POST /charges HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: declared\r\nContent-Length: 999999999\r\n\r\n", 5*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 413") {
		t.Fatalf("a declared 1 GB body: %q; want 413 at once", out)
	}
}

// jsonDoc builds a document with the key at /data/id among random members,
// random whitespace and nesting.
func jsonDoc(r *rand.Rand, id string) string {
	ws := func() string { return []string{"", " ", "\n", "\t ", "  \r\n"}[r.IntN(5)] }
	var members []string
	for i := range r.IntN(6) {
		members = append(members, fmt.Sprintf(`%s"m%d"%s:%s[1,{"id":"decoy%d"},"x\"y",null,true,-1.5e3]`, ws(), i, ws(), ws(), i))
	}
	data := fmt.Sprintf(`{%s"id"%s:%s"%s"%s,"other":{"id":"decoy"}}`, ws(), ws(), ws(), id, ws())
	members = append(members, `"data":`+data)
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return "{" + strings.Join(members, ","+ws()) + "}"
}

// JSON and form keys: found wherever the noise puts them; ambiguous documents
// (a name twice on the key's path, also in another case, a form field twice,
// a ';') are 400 and never forwarded; pathological nesting is no key.
func TestHostileBodyKeys(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, bodies)
	for i := range 30 {
		id := fmt.Sprintf("evt_%d", i)
		doc := jsonDoc(r, id)
		h := map[string]string{"X-Op": id, "Content-Type": "application/json"}
		first := p.Send(t, req{Method: "POST", Target: "/json", Host: "api.example", Body: doc, Header: h})
		again := p.Send(t, req{Method: "POST", Target: "/json", Host: "api.example", Body: doc, Header: h})
		if first.Status != 201 || !again.Replayed || up.Count(id) != 1 {
			t.Fatalf("document %s: %d %q / %d %q (ran %d)", doc, first.Status, first.Body, again.Status, again.Body, up.Count(id))
		}
	}
	before := up.Total()
	for _, doc := range []string{
		`{"data":{"id":"a","id":"b"}}`,
		`{"data":{"id":"a","ID":"b"}}`,
		`{"data":{"id":"a"},"DATA":{"id":"b"}}`,
		`{"data":{"id":"a","\u0069d":"b"}}`,
	} {
		if a := p.Send(t, req{Method: "POST", Target: "/json", Host: "api.example", Body: doc}); a.Status != 400 || !strings.Contains(a.Body, "invalid-key") {
			t.Fatalf("ambiguous %s: %d %s; want 400 invalid-key", doc, a.Status, a.Body)
		}
	}
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	for _, doc := range []string{deep, `{"data":{"id":"a"}} trailing`, `{"data":{"id":"a"`, `{"data":{"id":7}}`} {
		if a := p.Send(t, req{Method: "POST", Target: "/json", Host: "api.example", Body: doc}); a.Status != 400 || !strings.Contains(a.Body, "missing-key") {
			t.Fatalf("no key in %.40q: %d %s; want 400 missing-key", doc, a.Status, a.Body)
		}
	}
	for _, form := range []string{"id=a&id=b", "id=a;x=1", "x=1;id=a"} {
		a := p.Send(t, req{Method: "POST", Target: "/form", Host: "api.example", Body: form,
			Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}})
		if a.Status != 400 || !strings.Contains(a.Body, "invalid-key") {
			t.Fatalf("ambiguous form %q: %d %s; want 400 invalid-key", form, a.Status, a.Body)
		}
	}
	if n := up.Total() - before; n != 0 {
		t.Fatalf("%d ambiguous or keyless requests reached the upstream", n)
	}
}

// Pace: a stalled body is answered and its connection closed at
// body_read_timeout; a flood of stalled bodies past body_budget is answered
// 503 overloaded, nothing claimed or forwarded, and the budget comes back.
func TestHostilePace(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, up, bodies)

	start := time.Now()
	out := raw(t, p, "POST /charges HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: stall\r\nContent-Length: 60000\r\n\r\n0123456789", 10*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, "Connection: close") {
		t.Fatalf("a stalled body: %q", out)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("a stalled body held its connection %v (body_read_timeout is 1s)", d)
	}

	// 40 clients each declare 60000 bytes and stall: the 1 MiB budget holds 17.
	var wg sync.WaitGroup
	answers := make([]string, 40)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", p.Addr)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: flood-%d\r\nX-Op: flood\r\nContent-Length: 60000\r\n\r\nx", i)
			b := make([]byte, 64)
			n, _ := c.Read(b)
			answers[i] = string(b[:n])
		}()
	}
	wg.Wait()
	overloaded, timedOut := 0, 0
	for _, a := range answers {
		switch {
		case strings.HasPrefix(a, "HTTP/1.1 503"):
			overloaded++
		case strings.HasPrefix(a, "HTTP/1.1 400"):
			timedOut++
		default:
			t.Errorf("a stalled client got %q", a)
		}
	}
	if overloaded == 0 || timedOut == 0 {
		t.Fatalf("40 stalled 60000-byte bodies on a 1 MiB budget: %d overloaded, %d timed out; want both", overloaded, timedOut)
	}
	if n := up.Count("flood"); n != 0 {
		t.Fatalf("%d stalled requests reached the upstream", n)
	}
	// The budget came back.
	if a := p.Send(t, req{Method: "POST", Target: "/charges", Host: "api.example", Body: strings.Repeat("y", 60000),
		Header: map[string]string{"Idempotency-Key": "after-flood", "X-Op": "after"}}); a.Status != 201 {
		t.Fatalf("after the flood: %d %s", a.Status, a.Body)
	}
}
