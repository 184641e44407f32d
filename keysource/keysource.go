// Package keysource holds the key sources beyond the core's key header: a string
// in the JSON body at an RFC 6901 pointer, a field of a form-encoded body, a
// string field of a protobuf message by number (gRPC), and a digest of the
// body. Each is a middleware.KeySource; Parse builds one from its
// configuration string (key_source: "json:/data/id", "form:event_id",
// "proto:3.1", "body"), as the kinds it lists (Kinds) describe.
//
// A body key is found by scanning the buffered body once, in place: memory is
// bounded by the key, not the document. A key that reads two ways is refused
// (400), never guessed: a JSON member name on the pointer's path that appears
// twice in its object (also as Go folds struct field names), a form field that
// appears twice, a ";" in a form body.
package keysource

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/middleware"
)

// Key source specs: the value of key_source besides "json:<pointer>" and
// "form:<field>".
const (
	// Auto is key_header, or where a webhook preset puts the key (package
	// webhook): standard, the signed webhook-id; stripe, the body's /id; github
	// and hmac, a digest of the signed body.
	Auto = "auto"
	// Header is key_header.
	Header = "header"
	// Body makes a SHA-256 of the body the key: the same body is the same
	// operation.
	Body = "body"
)

// A kind is one kind of key source, described once: Parse, its errors and the
// help of key_source read the list, so a new kind is one entry in kinds.
type kind struct {
	// Name is the spec ("body"), or its part before the colon ("json").
	Name string
	// Arg names what follows the colon, as help shows it ("/pointer"); empty
	// for a kind that takes none.
	Arg string
	// Help is a few words for the help of key_source; may be empty.
	Help  string
	parse func(arg, keyHeader string) (middleware.KeySource, error)
}

// kinds are the key sources Parse builds, in the order help lists them.
var kinds = []kind{
	{Name: Header, Help: "key_header", parse: func(_, keyHeader string) (middleware.KeySource, error) {
		return middleware.HeaderKey{Name: http.CanonicalHeaderKey(keyHeader)}, nil
	}},
	{Name: Body, Help: "a SHA-256 of the body", parse: func(string, string) (middleware.KeySource, error) {
		return BodyDigest{}, nil
	}},
	{Name: "json", Arg: "/pointer", Help: "a string in the JSON body, RFC 6901", parse: func(arg, _ string) (middleware.KeySource, error) {
		return NewJSON(arg)
	}},
	{Name: "form", Arg: "field", Help: "a form-encoded body, whatever its Content-Type", parse: func(arg, _ string) (middleware.KeySource, error) {
		if arg == "" {
			return nil, errors.New("form: needs the field's name (form:field)")
		}
		return Form{Field: arg}, nil
	}},
	{Name: "proto", Arg: "N", Help: "a string field of a gRPC or protobuf message, by number; N.M in the message in field N", parse: func(arg, _ string) (middleware.KeySource, error) {
		return NewProto(arg)
	}},
}

// Kinds returns the kinds of key source Parse builds.
func Kinds() []kind { return slices.Clone(kinds) }

// Spec is how a spec of k is written: "body", "json:/pointer".
func (k kind) Spec() string {
	if k.Arg == "" {
		return k.Name
	}
	return k.Name + ":" + k.Arg
}

// Parse builds the key source spec names: one of Kinds (Header: key_header).
// Auto is not a source of its own: the caller resolves it (package config:
// key_header, or the webhook preset's).
func Parse(spec, keyHeader string) (middleware.KeySource, error) {
	name, arg, hasArg := strings.Cut(spec, ":")
	for _, k := range kinds {
		if k.Name == name && hasArg == (k.Arg != "") {
			return k.parse(arg, keyHeader)
		}
	}
	specs := []string{Auto}
	for _, k := range kinds {
		specs = append(specs, k.Spec())
	}
	return nil, fmt.Errorf("%q: want %s", spec, conf.OrList(specs))
}

// BodyDigest makes the body's SHA-256 the key ("sha256:<hex>"): the same body is
// the same operation. An empty body has no key.
type BodyDigest struct{}

// Key implements middleware.KeySource.
func (BodyDigest) Key(_ *http.Request, body []byte) (string, error) {
	if len(body) == 0 {
		return "", middleware.ErrNoKey
	}
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// NeedsBody implements middleware.KeySource.
func (BodyDigest) NeedsBody() bool { return true }

// ID implements middleware.KeySource.
func (BodyDigest) ID() string { return "body" }

// Describe implements middleware.KeySource.
func (BodyDigest) Describe() string { return "a body" }

// JSON takes the key from a string in the JSON body at an RFC 6901 pointer. A
// missing or non-string value, or a body that is not valid JSON anywhere, is no
// key; a member name on the path that appears twice in its object is an invalid
// key (see the package doc).
type JSON struct {
	pointer string   // as written: /data/idempotency_key
	tokens  []string // its reference tokens, unescaped
}

// NewJSON returns the JSON key source at pointer ("/id", "/data/key").
func NewJSON(pointer string) (JSON, error) {
	toks, err := parsePointer(pointer)
	if err != nil {
		return JSON{}, fmt.Errorf("json:%s: %w", pointer, err)
	}
	return JSON{pointer: pointer, tokens: toks}, nil
}

// Key implements middleware.KeySource.
func (j JSON) Key(_ *http.Request, body []byte) (string, error) {
	return jsonKey(body, j.tokens, j.pointer)
}

// NeedsBody implements middleware.KeySource.
func (JSON) NeedsBody() bool { return true }

// ID implements middleware.KeySource.
func (j JSON) ID() string { return "json:" + j.pointer }

// Describe implements middleware.KeySource.
func (j JSON) Describe() string { return "a string at " + j.pointer + " in its JSON body" }

// Form takes the key from a field of an application/x-www-form-urlencoded body,
// whatever the request's Content-Type (a webhook signature does not cover it).
type Form struct {
	Field string
}

// Key implements middleware.KeySource.
func (f Form) Key(_ *http.Request, body []byte) (string, error) { return formKey(body, f.Field) }

// NeedsBody implements middleware.KeySource.
func (Form) NeedsBody() bool { return true }

// ID implements middleware.KeySource.
func (f Form) ID() string { return "form:" + f.Field }

// Describe implements middleware.KeySource.
func (f Form) Describe() string { return "the form field " + f.Field + " in its body" }

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

// Errors of a body key; their text is the invalid-key problem's detail.
var (
	errKeyEmpty   = errors.New("the idempotency key is empty")
	errKeyLong    = errors.New("the idempotency key is longer than 255 characters")
	errKeyControl = errors.New("the idempotency key must not contain control characters")
)

// checkBodyKey checks a key taken from a body: 1–255 bytes, no control
// characters. (It never travels in a header, so it need not be ASCII.)
func checkBodyKey(s string) error {
	switch {
	case s == "":
		return errKeyEmpty
	case len(s) > middleware.MaxKeyLength:
		return errKeyLong
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return errKeyControl
		}
	}
	return nil
}
