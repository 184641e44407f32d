package config_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/config"
)

// A JSON member on the key's path that appears twice in its object, exactly or
// in another case, is ambiguous: Go upstreams decoding into a struct match names
// case-insensitively and take the last, a map decode takes the last exact one,
// other parsers the first. The core must not pick one: 400 invalid-key, nothing
// claimed or forwarded.
func TestJSONKeyAmbiguousNames(t *testing.T) {
	c := &counter{}
	h := configured(t, cfg(func(c *config.Config) { c.KeySourceSpec = "json:/data/id" })).Wrap(c)
	for _, body := range []string{
		`{"data":{"id":"a","id":"b"}}`,
		`{"data":{"id":"a","ID":"b"}}`,
		`{"data":{"Id":"a","iD":"b"}}`,           // no exact match, still two for a struct decode
		`{"data":{"id":"a"},"DATA":{"id":"b"}}`,  // higher on the path
		`{"data":{"id":"a","\u0049\u0044":"b"}}`, // "ID", escaped
	} {
		if w := serve(h, req{Body: body}); w.Code != 400 || !strings.Contains(w.Body.String(), "invalid-key") || !strings.Contains(w.Body.String(), "more than once") {
			t.Errorf("%s: %d %s, want 400 invalid-key naming the duplicate", body, w.Code, w.Body)
		}
	}
	// Names fold as the fingerprint folds them (internal/fold): as Go does
	// (bytes.EqualFold: the Kelvin sign is a k), .NET (ı is an i) and Java (a
	// dotted capital I is an i); é is still not an e.
	kh := configured(t, cfg(func(c *config.Config) { c.KeySourceSpec = "json:/key" })).Wrap(c)
	for _, body := range []string{`{"key":"a","\u212aey":"b"}`, `{"data":{"id":"dotted","\u0130d":"b"}}`, `{"data":{"id":"dotless","\u0131d":"b"}}`} {
		hh := kh
		if strings.Contains(body, "data") {
			hh = h
		}
		if w := serve(hh, req{Body: body}); w.Code != 400 || !strings.Contains(w.Body.String(), "more than once") {
			t.Errorf("%s: %d %s, want 400", body, w.Code, w.Body)
		}
	}
	if r := result(serve(h, req{Body: `{"data":{"id":"accent","\u00efd":"b"}}`})); r.Status != 201 {
		t.Errorf("ïd is not id: %+v, want the key \"accent\"", r)
	}
	if n := c.Calls.Load(); n != 1 {
		t.Fatalf("forwarded %d, want only the unambiguous one", n)
	}
	// Duplicates off the path do not matter.
	if r := result(serve(h, req{Body: `{"x":1,"x":2,"data":{"id":"k","other":1,"OTHER":2}}`})); r.Status != 201 {
		t.Fatalf("duplicates off the path: %+v", r)
	}
	// Invalid JSON anywhere, even after the key, is no key: passed through.
	before := c.Calls.Load()
	for _, body := range []string{`{"data":{"id":"k"}} x`, `{"data":{"id":"k"},"n":01}`, `{"data":{"id":"k"},"s":"\x"}`} {
		if r := result(serve(h, req{Body: body})); r.Status != 201 || r.Replayed {
			t.Fatalf("%s: %+v, want passed through", body, r)
		}
	}
	if n := c.Calls.Load() - before; n != 3 {
		t.Fatalf("pass-throughs %d, want 3", n)
	}
}

// A form body is parsed whatever its Content-Type (the signature, where there is
// one, does not cover the header); a raw ";" anywhere in it is ambiguous (Go
// refuses it, other parsers split fields on it): 400 invalid-key.
func TestFormKeyHostileBodies(t *testing.T) {
	c := &counter{}
	h := configured(t, cfg(func(c *config.Config) { c.KeySourceSpec = "form:idempotency_key" })).Wrap(c)
	for i, ct := range []string{"text/plain", "", "application/x-www-form-urlencoded"} {
		hdr := http.Header{}
		if ct != "" {
			hdr.Set("Content-Type", ct)
		}
		if r := result(serve(h, req{Body: "amount=5&idempotency_key=f-1", Header: hdr})); r.Status != 201 || r.Replayed != (i > 0) {
			t.Errorf("Content-Type %q: %+v, want the key found (replayed after the first)", ct, r)
		}
	}
	for _, body := range []string{
		"idempotency_key=a;idempotency_key=b",
		"amount=5;x=1&idempotency_key=k",
		"idempotency_key=k&note=a;b",
		"idempotency_key=a&idempotency%5Fkey=b", // the same name, escaped
		"idempotency_key=a&idempotency+key=b&idempotency_key=c",
	} {
		w := serve(h, req{Body: body})
		if w.Code != 400 || !strings.Contains(w.Body.String(), "invalid-key") {
			t.Errorf("%q: %d %s, want 400 invalid-key", body, w.Code, w.Body)
		}
	}
	if n := c.Calls.Load(); n != 1 {
		t.Errorf("forwarded %d, want 1", n)
	}
	// "idempotency key" (a plus) is another name; an invalid escape anywhere is no key.
	for _, body := range []string{"idempotency+key=a", "idempotency_key=k&x=%zz"} {
		if r := result(serve(h, req{Body: body})); r.Status != 201 || r.Replayed {
			t.Fatalf("%q: %+v, want passed through without a key", body, r)
		}
	}
}
