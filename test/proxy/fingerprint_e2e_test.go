package proxy_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// The built proxy, per route: a JSON retry serialised anew replays, one that
// means something else gets 422 naming the member (never its value), a
// multipart retry with a new boundary replays, and the default route still
// compares bytes.
func TestE2EFingerprints(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := startConfig(t, "upstream: "+up.URL+`
routes:
  - path: /orders
    fingerprint: json
    fingerprint_ignore: [/request_time]
    fingerprint_headers: [X-Tenant]
  - path: /upload
    fingerprint: multipart
`)
	order := `{"amount":1000,"currency":"EUR","request_time":"2026-11-25T00:00:00Z"}`
	first := p.Post(t, "/orders", "o1", order, "X-Tenant", "acme")
	if first.Status != 201 || first.Replayed {
		t.Fatalf("first: %+v", first)
	}
	again := p.Post(t, "/orders", "o1", "{\n  \"request_time\": \"2026-11-25T00:00:05Z\",\n  \"currency\": \"\\u0045UR\",\n  \"amount\": 1000.0\n}", "X-Tenant", "acme")
	if !again.Replayed || again.Body != first.Body || up.Count("o1") != 1 {
		t.Fatalf("re-serialised retry: %+v, executions %d", again, up.Count("o1"))
	}
	changed := p.Post(t, "/orders", "o1", `{"currency":"EUR","amount":1001,"request_time":"x"}`, "X-Tenant", "acme")
	var prob struct{ Type, Detail string }
	if err := json.Unmarshal([]byte(changed.Body), &prob); err != nil || changed.Status != 422 ||
		prob.Type != "urn:idemproxy:problem:mismatch" || !strings.Contains(prob.Detail, "/amount") ||
		strings.Contains(prob.Detail, "1001") || strings.Contains(prob.Detail, "currency") {
		t.Fatalf("changed amount: %+v (%v)", changed, err)
	}
	if r := p.Post(t, "/orders", "o1", order, "X-Tenant", "other"); r.Status != 422 {
		t.Fatalf("other tenant header: %+v", r)
	}
	if r := p.Post(t, "/orders", "o1", `{"amount":1000,"currency":"EUR"}`, "X-Tenant", "globex"); r.Status != 422 || !strings.Contains(r.Body, "the header X-Tenant") || strings.Contains(r.Body, "globex") {
		t.Fatalf("header named: %+v", r)
	}
	if r := p.Post(t, "/orders", "o2", `{"amount":1,"amount":2}`); r.Status != 400 || !strings.Contains(r.Body, "body-malformed") || up.Count("o2") != 0 {
		t.Fatalf("duplicate member: %+v, executions %d", r, up.Count("o2"))
	}

	mp := func(boundary, v string) string {
		return fmt.Sprintf("--%[1]s\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n%[2]s\r\n--%[1]s--\r\n", boundary, v)
	}
	ct := func(b string) string { return "multipart/form-data; boundary=" + b }
	if r := p.Post(t, "/upload", "u1", mp("aaa", "hi"), "Content-Type", ct("aaa")); r.Status != 201 {
		t.Fatalf("upload: %+v", r)
	}
	if r := p.Post(t, "/upload", "u1", mp("bbbbbb", "hi"), "Content-Type", ct("bbbbbb")); !r.Replayed || up.Count("u1") != 1 {
		t.Fatalf("new boundary: %+v", r)
	}
	if r := p.Post(t, "/upload", "u1", mp("c", "ho"), "Content-Type", ct("c")); r.Status != 422 || !strings.Contains(r.Body, "multipart part 1") {
		t.Fatalf("changed part: %+v", r)
	}

	p.Post(t, "/pay", "b1", `{"a":1,"b":2}`)
	if r := p.Post(t, "/pay", "b1", `{"b":2,"a":1}`); r.Status != 422 {
		t.Fatalf("bytes route replayed a reordered body: %+v", r)
	}
}

// The built proxy: a JSON body whose member names an upstream that ignores
// case reads as one (Go's encoding/json into a struct binds 1 from
// {"amount":100,"Amount":1} and 100 from the other order) is 400, at any depth,
// never forwarded; a form whose names an upstream reads as one (ASP.NET Core's
// case, PHP's amount.total and amount_total) keeps its order, so the other
// order is 422, never a replay of the first.
func TestE2EFingerprintFoldedNames(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := startConfig(t, "upstream: "+up.URL+`
routes:
  - path: /orders
    fingerprint: json
  - path: /form
    fingerprint: form
`)
	for i, body := range []string{
		`{"amount":100,"Amount":1}`,
		`{"Amount":1,"amount":100}`,
		`{"order":{"k":1,"\u212a":2}}`,
		`{"items":[{"sku":"a"},{"status":"paid","\u017ftatus":"void"}]}`,
	} {
		key := fmt.Sprintf("j%d", i)
		if r := p.Post(t, "/orders", key, body); r.Status != 400 || !strings.Contains(r.Body, "body-malformed") || !strings.Contains(r.Body, "case") || up.Count(key) != 0 {
			t.Fatalf("%s: %+v, executions %d", body, r, up.Count(key))
		}
	}
	if r := p.Post(t, "/orders", "j-ok", `{"amount":100,"nested":{"Amount":1}}`); r.Status != 201 {
		t.Fatalf("one name per object: %+v", r)
	}

	form := "application/x-www-form-urlencoded"
	for i, c := range [][2]string{
		{"amount=100&Amount=1", "Amount=1&amount=100"},
		{"amount.total=100&amount_total=1", "amount_total=1&amount.total=100"},
		{"amount%5Btotal=100&amount+total=1", "amount+total=1&amount%5Btotal=100"},
	} {
		key := fmt.Sprintf("f%d", i)
		if r := p.Post(t, "/form", key, c[0], "Content-Type", form); r.Status != 201 {
			t.Fatalf("%s: %+v", c[0], r)
		}
		r := p.Post(t, "/form", key, c[1], "Content-Type", form)
		if r.Status != 422 || r.Replayed || !strings.Contains(r.Body, "the order of form fields read as one name") || strings.Contains(r.Body, "100") || up.Count(key) != 1 {
			t.Fatalf("%s after %s: %+v, executions %d", c[1], c[0], r, up.Count(key))
		}
		if r := p.Post(t, "/form", key, c[0], "Content-Type", form); !r.Replayed {
			t.Fatalf("%s again: %+v", c[0], r)
		}
	}
	if p.Post(t, "/form", "f-moved", "amount=1&card_number=4242&card_cvc=123", "Content-Type", form).Status != 201 ||
		!p.Post(t, "/form", "f-moved", "card_cvc=123&amount=1&card_number=4242", "Content-Type", form).Replayed {
		t.Fatal("unrelated fields reordered: not replayed")
	}
}
