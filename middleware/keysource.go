package middleware

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// Key sources: the value of key_source (besides "json:<pointer>" and "form:<field>").
const (
	// KeySourceAuto takes the key from key_header, or from where the webhook
	// preset puts it: standard, the signed webhook-id; stripe, the body's /id;
	// github and hmac, a digest of the signed body.
	KeySourceAuto = "auto"
	// KeySourceHeader takes the key from key_header.
	KeySourceHeader = "header"
	// KeySourceBody makes a SHA-256 of the body the key: the same body is the
	// same operation.
	KeySourceBody = "body"
)

// WithKeySource sets where the key comes from: KeySourceAuto (the default),
// KeySourceHeader, KeySourceBody, "json:<pointer>" (an RFC 6901 JSON pointer
// into the body, e.g. "json:/data/idempotency_key", whose value must be a
// string) or "form:<field>" (a field of an application/x-www-form-urlencoded
// body, whatever the request's Content-Type). A body key is read before
// anything is claimed; a missing or non-string field, or a body that is not
// valid JSON (or has an invalid percent escape), is a missing key. An ambiguous
// key is an invalid key (400): a JSON member on the pointer's path that appears
// twice in its object (compared exactly or case-insensitively, as Go decodes
// into structs), a form field that appears twice, or a form body with a ";".
func WithKeySource(src string) Option { return func(c *config) { c.keySourceSpec = src } }

// keySource is a parsed key_source.
type keySource struct {
	kind string   // "header", "json", "form" or "body"
	name string   // the header (canonical), the pointer as written, or the form field
	ptr  []string // json: the pointer's reference tokens, unescaped
	// standardID: the standard preset's signed id, Webhook-Id or Svix-Id as
	// the verifier chose (headerName, webhook.go).
	standardID bool
}

var (
	errNoKey      = errors.New("no key")
	errKeyControl = errors.New("the idempotency key must not contain control characters")
)

// resolveKeySource parses spec, resolving auto for the webhook preset.
func resolveKeySource(spec, keyHeader string, wh *Webhook) (keySource, error) {
	preset := ""
	if wh != nil {
		preset = wh.Preset
	}
	if spec == "" || spec == KeySourceAuto {
		switch preset {
		case "":
			return keySource{kind: "header", name: keyHeader}, nil
		case WebhookStandard:
			return keySource{kind: "header", name: "Webhook-Id", standardID: true}, nil
		case WebhookStripe:
			return keySource{kind: "json", name: "/id", ptr: []string{"id"}}, nil
		default: // github, hmac: the only part of a delivery they sign is its body
			return keySource{kind: "body"}, nil
		}
	}
	kind, arg, _ := strings.Cut(spec, ":")
	switch {
	case spec == KeySourceHeader:
		if preset != "" {
			return keySource{}, fieldErr("key_source", "header: the %s signature does not cover %s, so a captured delivery could be sent again under a new key; use auto, body, json:… or form:…", preset, keyHeader)
		}
		return keySource{kind: "header", name: keyHeader}, nil
	case spec == KeySourceBody:
		return keySource{kind: "body"}, nil
	case kind == "json":
		ptr, err := parsePointer(arg)
		if err != nil {
			return keySource{}, fieldErr("key_source", "%s: %v", spec, err)
		}
		return keySource{kind: "json", name: arg, ptr: ptr}, nil
	case kind == "form" && arg != "":
		return keySource{kind: "form", name: arg}, nil
	}
	return keySource{}, fieldErr("key_source", "%q: want auto, header, body, json:/pointer or form:field", spec)
}

// parsePointer splits an RFC 6901 JSON pointer into its unescaped tokens. The
// whole document ("") is not a key.
func parsePointer(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, errors.New("a JSON pointer starts with / (e.g. /id or /data/idempotency_key)")
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || t[j+1] != '0' && t[j+1] != '1') {
				return nil, errors.New("~ must be followed by 0 or 1 (RFC 6901)")
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

// id names the key source in the store key: the same key from two sources is
// two records.
func (ks *keySource) id() string {
	switch ks.kind {
	case "json", "form":
		return ks.kind + ":" + ks.name
	}
	return ks.kind
}

// needsBody reports whether the key is in the body, which is then read first.
func (ks *keySource) needsBody() bool { return ks.kind != "header" }

// describe says what a request must carry, for the missing-key problem.
func (ks *keySource) describe() string {
	switch ks.kind {
	case "json":
		return "a string at " + ks.name + " in its JSON body"
	case "form":
		return "the form field " + ks.name + " in its body"
	case "body":
		return "a body"
	}
	return "an " + ks.name + " header"
}

// key extracts the key of r, whose body (when needsBody) is body. errNoKey means
// the request carries none; other errors are the invalid-key problem's detail.
// Memory is bounded by the key, not the body: json: and form: scan the body in
// place (jsonKey, formKey). A form body is parsed whatever its Content-Type,
// which a webhook signature does not cover.
func (ks *keySource) key(r *http.Request, body []byte) (string, error) {
	switch ks.kind {
	case "header":
		values := r.Header.Values(ks.headerName(r.Header))
		if len(values) == 0 {
			return "", errNoKey
		}
		return ParseKey(values)
	case "body":
		if len(body) == 0 {
			return "", errNoKey
		}
		sum := sha256.Sum256(body)
		return "sha256:" + hex.EncodeToString(sum[:]), nil
	case "json":
		return jsonKey(body, ks.ptr, ks.name)
	default: // form
		return formKey(body, ks.name)
	}
}

// checkBodyKey checks a key taken from a body: 1–255 bytes, no control
// characters. (It never travels in a header, so it need not be ASCII.)
func checkBodyKey(s string) error {
	switch {
	case s == "":
		return errKeyEmpty
	case len(s) > MaxKeyLength:
		return errKeyLong
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return errKeyControl
		}
	}
	return nil
}
