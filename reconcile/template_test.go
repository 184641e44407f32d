package reconcile_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
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
		{"GET /charges/{key}/status", held("ch_9f8-A.b~c", ""), "/charges/ch_9f8-A.b~c/status"},
		{"GET /charges/{key}/status", held(".hidden", ""), "/charges/.hidden/status"},
		{"GET /accounts/{header.x-account}/ops?id={json:/op/id}", held("k", `{"op":{"id":"op 1"}}`, "X-Account", "acct-7"),
			"/accounts/acct-7/ops?id=op+1"},
		{"HEAD /static", held("k", ""), "/static"},
		{"GET /charges?k={key}", held("..", ""), "/charges?k=.."},
		{"GET /charges?k={key}", held("%2e%2e/..;", ""), "/charges?k=%252e%252e%2F..%3B"},
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

// A value placed in the path is one literal segment or nothing: a value an
// upstream (or a proxy before it) could read as a dot segment, a separator,
// an escape or a parameter is never rendered into a path, whichever
// placeholder it fills; the error says why without the value, and points to
// the query, where the same value is escaped and sent.
func TestRenderRefusesAPathValueThatIsNotOneSegment(t *testing.T) {
	hostile := []string{
		".", "..", "...", "k.", "%2e", "%2E%2e", "%2e%2e", ".%2e", "%252e%252e", "%25252e", "..;", ";", "a;b",
		"/", "a/b", "../admin", "\\", "a\\b", "..\\", "%2f", "%5c", "a?b", "a#b", "a b", "\t", "é", "\x00", "a%00",
		"a:b", "a@b", "a+b=", "(a)",
	}
	for _, spec := range []string{"GET /v1/charges/{key}/status", "GET /v1/{header.X-Op}", "GET /v1/x{json:/id}x"} {
		r, err := reconcile.ParseRequest(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range hostile {
			q := "k"
			h := httptest.NewRequest("POST", "/charges", nil)
			h.Header.Set("X-Op", "op")
			var body []byte
			switch {
			case strings.Contains(spec, "{key}"):
				q = v
			case strings.Contains(spec, "{header"):
				h.Header.Set("X-Op", v)
			default:
				body = []byte(`{"id":` + strconv.Quote(v) + `}`)
			}
			got, err := r.Render(middleware.Held{Key: q, Request: h, Body: body})
			if err == nil {
				t.Errorf("%s with %q: rendered %q, want refused", spec, v, got)
				continue
			}
			ours := strings.Contains(err.Error(), "in the query")
			if !ours && strings.Contains(spec, "{json") && strings.ContainsAny(v, "\t\x00") {
				ours = true // the JSON key source refuses control characters itself
			}
			if !ours || len(v) > 2 && strings.Contains(err.Error(), v) {
				t.Errorf("%s with %q: error %q: want the reason without the value, and the query suggested", spec, v, err)
			}
		}
	}
	empty, _ := reconcile.ParseRequest("GET /v1/charges/{json:/id}/status")
	if got, err := empty.Render(middleware.Held{Key: "k", Request: httptest.NewRequest("POST", "/", nil), Body: []byte(`{"id":""}`)}); err == nil {
		t.Errorf("an empty value rendered %q: want refused (an empty segment)", got)
	}
	query, _ := reconcile.ParseRequest("GET /v1/charges?key={key}")
	for _, v := range hostile {
		got, err := query.Render(middleware.Held{Key: v, Request: httptest.NewRequest("POST", "/", nil)})
		if err != nil || got != "/v1/charges?key="+url.QueryEscape(v) {
			t.Errorf("%q in the query: %q, %v", v, got, err)
		}
	}
}
