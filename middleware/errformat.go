package middleware

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error formats: the value of error_format (besides a JSON template).
const (
	// ErrorFormatProblem is RFC 9457 application/problem+json.
	ErrorFormatProblem = "problem"
	// ErrorFormatStripe is Stripe's error shape,
	// {"error":{"type":…,"code":…,"message":…,"doc_url":…}}, with
	// Stripe-Should-Retry, so Stripe's SDKs parse it as a typed error and retry
	// only what is worth retrying.
	ErrorFormatStripe = "stripe"
)

// ProblemHeader names, on every answer the core writes itself (and a stored
// outcome-unknown answer), the problem type, whatever the body's format: clients
// branch on it without parsing the body.
const ProblemHeader = "Idempotency-Problem"

// WithErrorFormat sets the shape of the answers the core writes itself:
// ErrorFormatProblem (the default), ErrorFormatStripe, or a JSON template whose
// strings may hold {type}, {title}, {status}, {detail}, {code} and
// {retry_after}; a string that is exactly "{status}" or "{retry_after}" becomes
// a number. E.g. {"errors":[{"code":"{code}","message":"{detail}"}]}.
func WithErrorFormat(f string) Option { return func(c *config) { c.errorFormatSpec = f } }

// errorFormat is a parsed error_format.
type errorFormat struct {
	kind string // problem, stripe, template
	tmpl any    // the template, decoded
}

var templateFields = []string{"type", "title", "status", "detail", "code", "retry_after"}

func parseErrorFormat(spec string) (errorFormat, error) {
	switch spec {
	case "", ErrorFormatProblem:
		return errorFormat{kind: ErrorFormatProblem}, nil
	case ErrorFormatStripe:
		return errorFormat{kind: ErrorFormatStripe}, nil
	}
	if !strings.HasPrefix(strings.TrimSpace(spec), "{") && !strings.HasPrefix(strings.TrimSpace(spec), "[") {
		return errorFormat{}, fieldErr("error_format", "%q: want problem, stripe, or a JSON template", spec)
	}
	dec := json.NewDecoder(strings.NewReader(spec))
	dec.UseNumber()
	var tmpl any
	if err := dec.Decode(&tmpl); err != nil {
		return errorFormat{}, fieldErr("error_format", "the template is not JSON: %v", err)
	}
	if dec.More() {
		return errorFormat{}, fieldErr("error_format", "the template has text after its JSON value")
	}
	used := false
	var walk func(v any) error
	walk = func(v any) error {
		switch v := v.(type) {
		case string:
			for rest := v; ; {
				i := strings.IndexByte(rest, '{')
				if i < 0 {
					return nil
				}
				j := strings.IndexByte(rest[i:], '}')
				if j < 0 {
					return nil
				}
				name := rest[i+1 : i+j]
				if isIdent(name) {
					known := false
					for _, f := range templateFields {
						known = known || f == name
					}
					if !known {
						return fmt.Errorf("unknown placeholder {%s}: want one of {%s}", name, strings.Join(templateFields, "}, {"))
					}
					used = true
				}
				rest = rest[i+j+1:]
			}
		case map[string]any:
			for _, x := range v {
				if err := walk(x); err != nil {
					return err
				}
			}
		case []any:
			for _, x := range v {
				if err := walk(x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(tmpl); err != nil {
		return errorFormat{}, fieldErr("error_format", "%v", err)
	}
	if !used {
		return errorFormat{}, fieldErr("error_format", "the template uses no placeholder: every error would read the same")
	}
	return errorFormat{kind: "template", tmpl: tmpl}, nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c == '_') {
			return false
		}
	}
	return true
}

// code is the problem type's short name with underscores: in_flight, mismatch.
func (p Problem) code() string {
	return strings.ReplaceAll(strings.TrimPrefix(p.Type, ProblemTypeBase), "-", "_")
}

// retryable says whether the same request may be sent again with the same key
// and get another answer: in flight (later), the store or upstream unavailable
// (nothing ran).
func (p Problem) retryable() bool {
	switch p.Type {
	case ProblemInFlight, ProblemStoreUnavailable, ProblemTypeBase + "upstream-unavailable":
		return true
	}
	return false
}

// render returns the Content-Type, extra headers and body of p in this format.
func (f *errorFormat) render(p Problem, retryAfter time.Duration) (string, http.Header, []byte) {
	secs := 0
	if retryAfter > 0 {
		secs = int((retryAfter + time.Second - 1) / time.Second)
	}
	switch f.kind {
	case ErrorFormatStripe:
		typ := "invalid_request_error"
		switch {
		case p.Status >= 500:
			typ = "api_error"
		case p.Status == http.StatusConflict || p.Status == http.StatusUnprocessableEntity:
			typ = "idempotency_error"
		}
		code := p.code()
		if p.Type == ProblemInFlight {
			code = "idempotency_key_in_use" // Stripe's own code for this case
		}
		body, _ := json.Marshal(map[string]any{"error": map[string]any{
			"type": typ, "code": code, "message": p.Title + ": " + p.Detail, "doc_url": p.Type}})
		return "application/json", http.Header{"Stripe-Should-Retry": {strconv.FormatBool(p.retryable())}}, body
	case "template":
		vals := map[string]string{"type": p.Type, "title": p.Title, "status": strconv.Itoa(p.Status),
			"detail": p.Detail, "code": p.code(), "retry_after": strconv.Itoa(secs)}
		var fill func(v any) any
		fill = func(v any) any {
			switch v := v.(type) {
			case string:
				if v == "{status}" {
					return p.Status
				}
				if v == "{retry_after}" {
					return secs
				}
				for _, name := range templateFields {
					v = strings.ReplaceAll(v, "{"+name+"}", vals[name])
				}
				return v
			case map[string]any:
				out := make(map[string]any, len(v))
				for k, x := range v {
					out[k] = fill(x)
				}
				return out
			case []any:
				out := make([]any, len(v))
				for i, x := range v {
					out[i] = fill(x)
				}
				return out
			}
			return v
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(fill(f.tmpl)); err != nil { // cannot happen: it decoded from JSON
			return "application/json", nil, []byte(`{}`)
		}
		return "application/json", nil, bytes.TrimRight(buf.Bytes(), "\n")
	}
	b, err := json.Marshal(p)
	if err != nil { // cannot happen: the struct holds only strings and ints
		b = []byte(`{"type":"about:blank","status":500}`)
	}
	return "application/problem+json", nil, b
}

// write writes p in format f; key, when not empty, is echoed in keyHeader.
func (f *errorFormat) write(w http.ResponseWriter, p Problem, retryAfter time.Duration, keyHeader, key string) {
	ct, extra, b := f.render(p, retryAfter)
	h := w.Header()
	for k, v := range extra {
		h[k] = v
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	h.Set(ProblemHeader, p.Type)
	h.Del("Transfer-Encoding")
	if key != "" {
		h.Set(keyHeader, key)
	}
	if retryAfter > 0 {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.Itoa(secs))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}
