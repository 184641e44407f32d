package testutil

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
)

// Counter is an http.Handler that counts its executions. Unless Fn answers,
// it answers 201 "call N body B" with X-Call: N.
type Counter struct {
	Calls atomic.Int64
	Fn    func(w http.ResponseWriter, r *http.Request)
}

func (c *Counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := strconv.FormatInt(c.Calls.Add(1), 10)
	if c.Fn != nil {
		c.Fn(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Call", n)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte("call " + n + " body " + string(body)))
}

// Req is a request a test serves in process: POST /charge unless Method and
// Target say otherwise, with Key in Idempotency-Key when set.
type Req struct {
	Method, Target, Key, Body string
	Header                    http.Header
}

// Build makes the request.
func (q Req) Build() *http.Request {
	m, target := q.Method, q.Target
	if m == "" {
		m = http.MethodPost
	}
	if target == "" {
		target = "/charge"
	}
	r := httptest.NewRequest(m, target, strings.NewReader(q.Body))
	if q.Key != "" {
		r.Header.Set("Idempotency-Key", q.Key)
	}
	for k, v := range q.Header {
		r.Header[k] = v
	}
	return r
}

// Serve serves q through h in process.
func Serve(h http.Handler, q Req) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, q.Build())
	return w
}

// Post serves a keyed POST /charge with body through h, in process.
func Post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	return Serve(h, Req{Key: key, Body: body})
}

// Result is what a served request got back.
type Result struct {
	Status   int
	Replayed bool // Idempotent-Replayed: true
	Body     string
}

// ResultOf reads w.
func ResultOf(w *httptest.ResponseRecorder) Result {
	return Result{w.Code, w.Header().Get("Idempotent-Replayed") == "true", w.Body.String()}
}
