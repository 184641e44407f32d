// Package errformat holds the shapes of the answers the core writes itself
// besides RFC 9457 problems (middleware.ProblemJSON, the default): Stripe's
// error object, which Stripe's SDKs parse as a typed error, and a JSON template
// of your API's own error shape. Each is a middleware.ErrorFormat; Parse builds
// one from its configuration string (error_format): a name Formats lists, or a
// template.
package errformat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

// Error format specs: the value of error_format besides a JSON template.
const (
	// Problem is RFC 9457 application/problem+json, the default.
	Problem = "problem"
	// StripeSpec is Stripe's error shape.
	StripeSpec = "stripe"
)

// A Format is one error format with a name, described once: Parse, its errors
// and the help of error_format read the list, so a new format is one entry in
// formats.
type Format struct {
	Name   string // the value of error_format
	Help   string // a few words for the help of error_format; may be empty
	format middleware.ErrorFormat
}

// formats are the named error formats, the default first.
var formats = []Format{
	{Name: Problem, Help: "RFC 9457", format: middleware.ProblemJSON{}},
	{Name: StripeSpec, Help: "Stripe's error object and Stripe-Should-Retry", format: Stripe{}},
}

// Formats returns the named error formats, the default first; any other
// error_format is a JSON template.
func Formats() []Format { return slices.Clone(formats) }

// Parse builds the error format spec names: one of Formats ("" is the
// default, Problem), or a JSON template (see Template).
func Parse(spec string) (middleware.ErrorFormat, error) {
	if spec == "" {
		return formats[0].format, nil
	}
	for _, f := range formats {
		if f.Name == spec {
			return f.format, nil
		}
	}
	return NewTemplate(spec)
}

// Stripe is Stripe's error shape,
// {"error":{"type":…,"code":…,"message":…,"doc_url":…}}, with
// Stripe-Should-Retry, so Stripe's SDKs parse it as a typed error and retry only
// what is worth retrying: type is idempotency_error for 409 and 422,
// invalid_request_error for other 4xx and api_error for 5xx; code is the problem
// type's last part (in_flight is Stripe's own idempotency_key_in_use).
type Stripe struct{}

// Render implements middleware.ErrorFormat.
func (Stripe) Render(p middleware.Problem, _ time.Duration) (string, http.Header, []byte) {
	typ := "invalid_request_error"
	switch {
	case p.Status >= 500:
		typ = "api_error"
	case p.Status == http.StatusConflict || p.Status == http.StatusUnprocessableEntity:
		typ = "idempotency_error"
	}
	code := p.Code()
	if p.Type == middleware.ProblemInFlight {
		code = "idempotency_key_in_use" // Stripe's own code for this case
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"type": typ, "code": code, "message": p.Title + ": " + p.Detail, "doc_url": p.Type}})
	return "application/json", http.Header{"Stripe-Should-Retry": {strconv.FormatBool(p.Retryable)}}, body
}

// Template is a JSON template of an API's own error shape: its strings may hold
// {type}, {title}, {status}, {detail}, {code} and {retry_after}, each filled
// once (a value is never read as a template); a string that is exactly
// "{status}" or "{retry_after}" becomes a number. E.g.
// {"errors":[{"code":"{code}","message":"{detail}"}]}.
type Template struct {
	tmpl any // decoded
}

var (
	templateFields = []string{"type", "title", "status", "detail", "code", "retry_after"}
	placeholder    = regexp.MustCompile(`\{([a-z_]+)\}`)
)

// NewTemplate parses a template: JSON, with known placeholders, at least one.
func NewTemplate(spec string) (Template, error) {
	if !strings.HasPrefix(strings.TrimSpace(spec), "{") && !strings.HasPrefix(strings.TrimSpace(spec), "[") {
		var names []string
		for _, f := range formats {
			names = append(names, f.Name)
		}
		return Template{}, cache.FieldErrorf("", "error_format", "%q: want %s, or a JSON template", spec, strings.Join(names, ", "))
	}
	dec := json.NewDecoder(strings.NewReader(spec))
	dec.UseNumber()
	var tmpl any
	if err := dec.Decode(&tmpl); err != nil {
		return Template{}, cache.FieldErrorf("", "error_format", "the template is not JSON: %v", err)
	}
	if dec.More() {
		return Template{}, cache.FieldErrorf("", "error_format", "the template has text after its JSON value")
	}
	used := false
	var bad error
	mapStrings(tmpl, func(str string) any {
		for _, m := range placeholder.FindAllStringSubmatch(str, -1) {
			if !slices.Contains(templateFields, m[1]) {
				bad = fmt.Errorf("unknown placeholder {%s}: want one of {%s}", m[1], strings.Join(templateFields, "}, {"))
			}
			used = true
		}
		return str
	})
	if bad != nil {
		return Template{}, cache.FieldErrorf("", "error_format", "%v", bad)
	}
	if !used {
		return Template{}, cache.FieldErrorf("", "error_format", "the template uses no placeholder: every error would read the same")
	}
	return Template{tmpl: tmpl}, nil
}

// Render implements middleware.ErrorFormat.
func (f Template) Render(p middleware.Problem, retryAfter time.Duration) (string, http.Header, []byte) {
	secs := middleware.RetrySeconds(retryAfter)
	vals := map[string]string{"type": p.Type, "title": p.Title, "status": strconv.Itoa(p.Status),
		"detail": p.Detail, "code": p.Code(), "retry_after": strconv.Itoa(secs)}
	filled := mapStrings(f.tmpl, func(str string) any {
		switch str {
		case "{status}":
			return p.Status
		case "{retry_after}":
			return secs
		}
		// One pass over the template's own text: each placeholder is
		// replaced once, and a value (a detail quoting a path with
		// "{code}" in it) is never scanned for placeholders again.
		return placeholder.ReplaceAllStringFunc(str, func(m string) string {
			if v, ok := vals[m[1:len(m)-1]]; ok {
				return v
			}
			return m // NewTemplate admits known names only
		})
	})
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(filled); err != nil { // cannot happen: it decoded from JSON
		return "application/json", nil, []byte(`{}`)
	}
	return "application/json", nil, bytes.TrimRight(buf.Bytes(), "\n")
}

// mapStrings returns v (decoded JSON) with every string s replaced by f(s), in
// objects and arrays at any depth.
func mapStrings(v any, f func(string) any) any {
	switch v := v.(type) {
	case string:
		return f(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = mapStrings(x, f)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = mapStrings(x, f)
		}
		return out
	}
	return v
}
