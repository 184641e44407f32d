package reconcile_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/reconcile"
)

func TestParseRequestRefusesWhatCannotBeSent(t *testing.T) {
	for _, spec := range []string{
		"", "GET", "/charges", "get /charges", "GET charges", "GET //evil.example/x", "GET http://evil/x",
		"GET /a b", "GET /a#frag", "GET /a/{key", "GET /a/key}", "GET /a/{nope}", "GET /a/{header.}",
		"GET /a/{header.X Y}", "GET /a/{json:id}", "GET /a\x00", "GET /" + strings.Repeat("a", reconcile.MaxTemplate),
	} {
		if r, err := reconcile.ParseRequest(spec); err == nil {
			t.Errorf("ParseRequest(%q) = %v, want an error", spec, r)
		}
	}
}

func TestRenderEscapesEachValueForWhereItStands(t *testing.T) {
	held := func(key, body string, hdr ...string) middleware.Held {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return middleware.Held{Key: key, Request: r, Body: []byte(body)}
	}
	for _, tc := range []struct {
		spec string
		h    middleware.Held
		want string
	}{
		{"GET /charges?idempotency_key={key}", held("a&b=c d/é", ""), "/charges?idempotency_key=a%26b%3Dc+d%2F%C3%A9"},
		{"GET /charges/{key}/status", held("../admin?x=1", ""), "/charges/..%2Fadmin%3Fx=1/status"},
		{"GET /accounts/{header.x-account}/ops?id={json:/op/id}", held("k", `{"op":{"id":"op 1"}}`, "X-Account", "acct/7"),
			"/accounts/acct%2F7/ops?id=op+1"},
		{"HEAD /static", held("k", ""), "/static"},
		{"GET /charges/{key}/status", held("..", ""), "/charges/%2E%2E/status"},
		{"GET /charges/{key}/status", held(".", ""), "/charges/%2E/status"},
		{"GET /charges?k={key}", held("..", ""), "/charges?k=.."},
	} {
		r, err := reconcile.ParseRequest(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		got, err := r.Render(tc.h)
		if err != nil || got != tc.want {
			t.Errorf("%s: Render = %q, %v; want %q", tc.spec, got, err, tc.want)
		}
	}
	r, _ := reconcile.ParseRequest("GET /x?a={header.X-Account}&b={json:/id}")
	for name, h := range map[string]middleware.Held{
		"no header":       held("k", `{"id":"1"}`),
		"no field":        held("k", `{"other":"1"}`, "X-Account", "a"),
		"not JSON":        held("k", `id=1`, "X-Account", "a"),
		"field twice":     held("k", `{"id":"1","id":"2"}`, "X-Account", "a"),
		"header too long": held("k", `{"id":"1"}`, "X-Account", strings.Repeat("a", reconcile.MaxRendered)),
	} {
		if got, err := r.Render(h); err == nil {
			t.Errorf("%s: Render = %q, want an error", name, got)
		}
	}
	if r.Method != http.MethodGet || !r.NeedsBody() {
		t.Fatalf("parsed %+v", r)
	}
}
