package errformat_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

// A template is filled in one pass: each placeholder of the template is
// replaced once, and text that came from a value (a detail holding "{code}", a
// title holding "{detail}") is never scanned again.
func TestErrorTemplateFillsOnce(t *testing.T) {
	h := handler(t, `{"message":"{detail}","title":"{title}","both":"{code}: {detail} ({type})","status":"{status}"}`)
	p := middleware.Problem{Type: middleware.ProblemMismatch, Title: "T {detail} {status}", Status: 422,
		Detail: "path /a/{code}/{type}/{retry_after} and {nope}"}
	w := httptest.NewRecorder()
	h.WriteProblem(w, httptest.NewRequest("POST", "/", nil), p, 0)
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	want := map[string]any{
		"message": p.Detail,
		"title":   p.Title,
		"both":    "mismatch: " + p.Detail + " (" + p.Type + ")",
		"status":  422.0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}
