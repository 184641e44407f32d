package middleware

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

var (
	templateFields = []string{"type", "title", "status", "detail", "code", "retry_after"}
	placeholder    = regexp.MustCompile(`\{([a-z_]+)\}`)
)

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
		return errorFormat{}, fieldErr("error_format", "%v", bad)
	}
	if !used {
		return errorFormat{}, fieldErr("error_format", "the template uses no placeholder: every error would read the same")
	}
	return errorFormat{kind: "template", tmpl: tmpl}, nil
}

// code is the problem type's short name with underscores: in_flight, mismatch.
func (p Problem) code() string {
	return strings.ReplaceAll(strings.TrimPrefix(p.Type, ProblemTypeBase), "-", "_")
}

// render returns the Content-Type, extra headers and body of p in this format.
func (f *errorFormat) render(p Problem, retryAfter time.Duration) (string, http.Header, []byte) {
	secs := retrySeconds(retryAfter)
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
		return "application/json", http.Header{"Stripe-Should-Retry": {strconv.FormatBool(p.Retryable)}}, body
	case "template":
		vals := map[string]string{"type": p.Type, "title": p.Title, "status": strconv.Itoa(p.Status),
			"detail": p.Detail, "code": p.code(), "retry_after": strconv.Itoa(secs)}
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
				return m // parseErrorFormat admits known names only
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
		h.Set("Retry-After", strconv.Itoa(retrySeconds(retryAfter)))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// retrySeconds is d in whole seconds, rounded up (0 for none).
func retrySeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
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
