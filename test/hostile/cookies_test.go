package hostile_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// cookieValue is a session value as a hostile or merely unusual client sends
// it: quoted, with escapes (Python's SimpleCookie writes "\054" for a comma),
// backslashes, commas, '=' and non-ASCII bytes, all of which net/http's cookie
// parser drops.
func cookieValue(r *rand.Rand, i int) string {
	parts := []string{`"`, `\054`, `\\`, ",", "=", "é", "ü", "%3B", "(", ")", "/", "?", "@", "[", "]", "{", "}"}
	var b strings.Builder
	if r.IntN(2) == 0 {
		b.WriteByte('"')
	}
	b.WriteString(fmt.Sprintf("s%d", i))
	for range 1 + r.IntN(4) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}

// Cookies: a route scoped by a session cookie gives every distinct session its
// own keys, whatever bytes the value holds and wherever among other cookies it
// sits: one session never gets another's answer; its own retry replays.
func TestHostileCookieScope(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, `routes:
  - path: /account
    scope_headers: [Cookie:session]
`)
	seen := map[string]bool{}
	for i := range 30 {
		v := cookieValue(r, i)
		if seen[v] {
			continue
		}
		seen[v] = true
		var filler []string
		for j := range r.IntN(3500) {
			filler = append(filler, fmt.Sprintf("c%d=%d", j, j))
		}
		pos := r.IntN(len(filler) + 1)
		cookies := append(append(append([]string{}, filler[:pos]...), "session="+v), filler[pos:]...)
		op := fmt.Sprintf("cookie-%d", i)
		h := map[string]string{"Idempotency-Key": "shared-key", "Cookie": strings.Join(cookies, "; "), "X-Op": op}
		first := p.Send(t, req{Method: "POST", Target: "/account", Host: "api.example", Body: "same body", Header: h})
		if first.Status != 201 || first.Replayed || !strings.Contains(first.Body, op) {
			t.Fatalf("session %q (after %d cookies): %d %q replayed=%v; want its own first run", v, pos, first.Status, first.Body, first.Replayed)
		}
		again := p.Send(t, req{Method: "POST", Target: "/account", Host: "api.example", Body: "same body", Header: h})
		if !again.Replayed || again.Body != first.Body {
			t.Fatalf("session %q retry: %d %q; want its own replay", v, again.Status, again.Body)
		}
		if n := up.Count(op); n != 1 {
			t.Fatalf("session %q ran %d times", v, n)
		}
	}
}
