package frameworks_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemproxy/idemproxy/middleware"
)

// send POSTs body to path through h with the key, and prints what the client
// got: the status, whether it was a replay, and the body (a problem's type for
// the core's own answers).
func send(h http.Handler, path, key, body string) {
	r := httptest.NewRequest("POST", path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	out := strings.TrimSpace(w.Body.String())
	if p := w.Header().Get(middleware.ProblemHeader); p != "" {
		out = p
	}
	fmt.Printf("%d replayed=%s %s\n", w.Code, w.Header().Get("Idempotent-Replayed"), out)
}
