package hostile_test

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/webhooktest"
)

// routes tracks /charges (a key is required), leaves /internal untracked,
// and verifies GitHub and Standard Webhooks deliveries.
const routes = `routes:
  - path: /charges
    require_key: true
  - path: /internal
    enabled: false
  - path: /notes
    scope_headers: []
  - path: /webhooks/github
    webhook: github
    webhook_secrets: [env:HOSTILE_GH_SECRET]
    require_key: true
  - path: /webhooks/standard
    webhook: standard
    webhook_secrets: [env:HOSTILE_STD_SECRET]
    require_key: true
`

var secrets = []string{"HOSTILE_GH_SECRET=gh-secret", "HOSTILE_STD_SECRET=" + webhooktest.StandardSecret}

// caseOf spells s with each letter's case chosen at random.
func caseOf(r *rand.Rand, s string) string {
	b := []byte(s)
	for i, c := range b {
		if r.IntN(2) == 0 {
			if c >= 'a' && c <= 'z' {
				b[i] = c - 32
			} else if c >= 'A' && c <= 'Z' {
				b[i] = c + 32
			}
		}
	}
	return string(b)
}

// encodeSome percent-encodes some of p's unreserved characters, in either hex
// case: the same path to every server.
func encodeSome(r *rand.Rand, p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '/' && r.IntN(3) == 0 {
			h := fmt.Sprintf("%%%02X", c)
			if r.IntN(2) == 0 {
				h = strings.ToLower(h)
			}
			b.WriteString(h)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// withParams appends ;name=value to some of p's segments, as Tomcat's
// jsessionid does.
func withParams(r *rand.Rand, p string) string {
	segs := strings.Split(p, "/")
	for i := 1; i < len(segs); i++ {
		if r.IntN(2) == 0 {
			segs[i] += fmt.Sprintf(";p%d=%d", r.IntN(9), r.IntN(99))
		}
	}
	return strings.Join(segs, "/")
}

// Case: a tracked method, or a protected route, in any case is tracked and
// protected; one key under every spelling runs once.
func TestHostileCase(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, routes, secrets...)
	for i := range 40 {
		method := caseOf(r, []string{"POST", "PATCH"}[i%2])
		path := caseOf(r, "/charges/ch_42")
		if a := p.Send(t, req{Method: method, Target: path, Host: "api.example", Body: "x"}); a.Status != 400 || !strings.Contains(a.Body, "missing-key") {
			t.Fatalf("%s %s without a key: %d %s; want 400 missing-key", method, path, a.Status, a.Body)
		}
		hook := caseOf(r, "/webhooks/github")
		if a := p.Send(t, req{Method: method, Target: hook, Host: "api.example", Body: "{}"}); a.Status != 401 {
			t.Fatalf("%s %s unsigned: %d %s; want 401", method, hook, a.Status, a.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("%d unprotected requests reached the upstream: %v", n, up.Paths())
	}
	// One key, one operation, the method in any case: one run.
	h := map[string]string{"Idempotency-Key": "case-1", "X-Op": "case-1"}
	for range 20 {
		a := p.Send(t, req{Method: caseOf(r, "POST"), Target: "/charges", Host: "api.example", Body: "x", Header: h})
		if a.Status != 201 {
			t.Fatalf("POST /charges: %d %s", a.Status, a.Body)
		}
	}
	if n := up.Count("case-1"); n != 1 {
		t.Fatalf("one key under 20 method spellings ran %d times", n)
	}
	if n := up.Path("POST /charges"); n != 1 {
		t.Fatalf("the upstream saw %v; want the method forwarded as POST", up.Paths())
	}
}

// Encoding and parameters: a path spelled with escapes, or with ;parameters,
// is the same route, so its protection applies; one key never runs twice
// whatever the spelling (a retry whose spelling means the same path replays,
// one that differs in case or parameters gets 422).
func TestHostileEncodingAndParameters(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, routes, secrets...)
	h := map[string]string{"Idempotency-Key": "enc-1", "X-Op": "enc-1"}
	first := p.Send(t, req{Method: "POST", Target: "/charges/ch_42", Host: "api.example", Body: "x", Header: h})
	if first.Status != 201 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	for range 60 {
		path := "/charges/ch_42"
		switch r.IntN(3) {
		case 0:
			path = encodeSome(r, path)
		case 1:
			path = withParams(r, path)
		default:
			path = withParams(r, encodeSome(r, caseOf(r, path)))
		}
		if a := p.Send(t, req{Method: "POST", Target: path, Host: "api.example", Body: "x"}); a.Status != 400 || !strings.Contains(a.Body, "missing-key") {
			t.Fatalf("POST %s without a key: %d %s; want the /charges route's 400 missing-key", path, a.Status, a.Body)
		}
		a := p.Send(t, req{Method: "POST", Target: path, Host: "api.example", Body: "x", Header: h})
		switch {
		case a.Replayed && a.Body == first.Body:
		case a.Status == 422:
		default:
			t.Fatalf("POST %s with the first request's key: %d %q; want the replay or 422", path, a.Status, a.Body)
		}
		// An escape may hide a capital (caseOf, then encodeSome: %52 is R):
		// look at the path unescaped.
		if plain, _ := url.PathUnescape(path); !strings.ContainsAny(plain, ";ABCDEFGHIJKLMNOPQRSTUVWXYZ") && !a.Replayed {
			t.Fatalf("POST %s (only escapes differ): %d %q; want the replay", path, a.Status, a.Body)
		}
	}
	if n := up.Count("enc-1"); n != 1 {
		t.Fatalf("one key under 60 path spellings ran %d times", n)
	}
}

// Dot segments, however hidden, and encoded separators never pick one route
// and reach another: refused, never forwarded.
func TestHostileDotSegments(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, routes, secrets...)
	dots := []string{"..", "..;", "..;x=1", "%2e%2e", "%2E.", ".%2e;", ".", ".;", "", "x%2F..", "x%2f..%2f..", "x%5C..", `x\..`, "%00", "x%0A"}
	for range 80 {
		segs := []string{"internal", "x"}
		pos := r.IntN(len(segs) + 1)
		d := dots[r.IntN(len(dots))]
		segs = append(segs[:pos], append([]string{d}, segs[pos:]...)...)
		path := "/" + strings.Join(segs, "/") + "/charges"
		if r.IntN(2) == 0 {
			path = caseOf(r, path)
		}
		a := p.Send(t, req{Method: caseOf(r, "POST"), Target: path, Host: "api.example", Body: "x"})
		if a.Status != 400 || !strings.Contains(a.Body, "non-canonical-path") {
			t.Fatalf("POST %s: %d %s; want 400 non-canonical-path", path, a.Status, a.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("%d non-canonical requests reached the upstream: %v", n, up.Paths())
	}
}

// Host spellings: the same Host spelled otherwise is the same scope; a webhook
// delivery is the same delivery under any Host at all.
func TestHostileHostSpellings(t *testing.T) {
	skipShort(t)
	r := rng(t)
	up := newUpstream(t)
	p := start(t, up, routes, secrets...)
	spell := func() string {
		h := caseOf(r, "api.example")
		if r.IntN(2) == 0 {
			h += "."
		}
		return h + []string{"", ":80", ":443", ":", ":0080"}[r.IntN(5)]
	}
	h := map[string]string{"Idempotency-Key": "host-1", "X-Op": "host-1"}
	if a := p.Send(t, req{Method: "POST", Target: "/notes", Host: "api.example", Body: "x", Header: h}); a.Status != 201 {
		t.Fatalf("first: %d %s", a.Status, a.Body)
	}
	for range 40 {
		host := spell()
		if a := p.Send(t, req{Method: "POST", Target: "/notes", Host: host, Body: "x", Header: h}); !a.Replayed {
			t.Fatalf("retry with Host %q: %d %s; want the replay", host, a.Status, a.Body)
		}
	}
	if n := up.Count("host-1"); n != 1 {
		t.Fatalf("one key under 40 Host spellings ran %d times", n)
	}

	body := `{"action":"opened","number":9}`
	delivery := with(webhooktest.GitHub("gh-secret", "d-9", body), "X-Op", "gh-9")
	standard := `{"type":"invoice.paid"}`
	for i := range 40 {
		host := spell()
		if i%3 == 0 {
			host = fmt.Sprintf("h%d.evil.example", r.IntN(1000))
		}
		a := p.Send(t, req{Method: "POST", Target: "/webhooks/github", Host: host, Body: body, Header: delivery})
		if a.Status != 201 || (i > 0) != a.Replayed {
			t.Fatalf("GitHub delivery %d under Host %q: %d %s replayed=%v", i, host, a.Status, a.Body, a.Replayed)
		}
		sd := with(webhooktest.Standard(webhooktest.StandardSecret, "msg_9", time.Now(), standard), "X-Op", "std-9")
		if a := p.Send(t, req{Method: "POST", Target: "/webhooks/standard", Host: host, Body: standard, Header: sd}); a.Status != 201 || (i > 0) != a.Replayed {
			t.Fatalf("Standard delivery %d under Host %q: %d %s replayed=%v", i, host, a.Status, a.Body, a.Replayed)
		}
	}
	if a, b := up.Count("gh-9"), up.Count("std-9"); a != 1 || b != 1 {
		t.Fatalf("captured deliveries under 40 Hosts ran %d and %d times, want once each", a, b)
	}
	// Neither a header key nor another route claims a webhook's id.
	if a := p.Send(t, req{Method: "POST", Target: "/notes", Host: "api.example", Body: "x",
		Header: map[string]string{"Idempotency-Key": "msg_10", "X-Op": "pre"}}); a.Status != 201 {
		t.Fatalf("pre-claim: %d %s", a.Status, a.Body)
	}
	sd := with(webhooktest.Standard(webhooktest.StandardSecret, "msg_10", time.Now(), standard), "X-Op", "std-10")
	if a := p.Send(t, req{Method: "POST", Target: "/webhooks/standard", Host: "api.example", Body: standard, Header: sd}); a.Status != 201 || a.Replayed {
		t.Fatalf("the delivery msg_10 after a header pre-claim: %d %s", a.Status, a.Body)
	}
}
