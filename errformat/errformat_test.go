package errformat_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// The answers the core writes itself, in each format: shape, headers, key echo.
func TestErrorFormats(t *testing.T) {
	type answer struct {
		code int
		h    http.Header
		body map[string]any
	}
	for _, tc := range []struct {
		format   string
		ct       string
		inFlight func(t *testing.T, a answer)
		mismatch func(t *testing.T, a answer)
	}{
		{"problem", "application/problem+json",
			func(t *testing.T, a answer) {
				if a.body["type"] != middleware.ProblemInFlight || a.body["status"] != 409.0 {
					t.Errorf("in flight: %v", a.body)
				}
			},
			func(t *testing.T, a answer) {
				if a.body["type"] != middleware.ProblemMismatch {
					t.Errorf("mismatch: %v", a.body)
				}
			}},
		{"stripe", "application/json",
			func(t *testing.T, a answer) {
				e, _ := a.body["error"].(map[string]any)
				if e["type"] != "idempotency_error" || e["code"] != "idempotency_key_in_use" || e["doc_url"] != middleware.ProblemInFlight ||
					!strings.Contains(e["message"].(string), "still being processed") || a.h.Get("Stripe-Should-Retry") != "true" {
					t.Errorf("in flight: %v %v", a.body, a.h)
				}
			},
			func(t *testing.T, a answer) {
				e, _ := a.body["error"].(map[string]any)
				if e["type"] != "idempotency_error" || e["code"] != "mismatch" || a.h.Get("Stripe-Should-Retry") != "false" {
					t.Errorf("mismatch: %v %v", a.body, a.h)
				}
			}},
		{`{"errors":[{"code":"{code}","status":"{status}","retry_in":"{retry_after}","text":"{title}: {detail}","kind":"{type}"}],"ok":false}`, "application/json",
			func(t *testing.T, a answer) {
				e := a.body["errors"].([]any)[0].(map[string]any)
				if e["code"] != "in_flight" || e["status"] != 409.0 || e["retry_in"] != 2.0 || e["kind"] != middleware.ProblemInFlight ||
					!strings.HasPrefix(e["text"].(string), "Request with this idempotency key is in progress: ") || a.body["ok"] != false {
					t.Errorf("in flight: %v", a.body)
				}
			},
			func(t *testing.T, a answer) {
				e := a.body["errors"].([]any)[0].(map[string]any)
				if e["code"] != "mismatch" || e["status"] != 422.0 || e["retry_in"] != 0.0 {
					t.Errorf("mismatch: %v", a.body)
				}
			}},
	} {
		t.Run(tc.format[:min(len(tc.format), 8)], func(t *testing.T) {
			release := make(chan struct{})
			started := make(chan struct{}, 1)
			next := middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
				switch r.URL.Path {
				case "/slow":
					started <- struct{}{}
					<-release
				case "/reset":
					return middleware.MarkOutcomeUnknown(errors.New("connection reset"))
				}
				w.WriteHeader(http.StatusCreated)
				return nil
			})
			h := handler(t, tc.format, func(s *middleware.Settings) { s.RetryAfter = 1500 * time.Millisecond })
			do := func(q req) answer {
				w := httptest.NewRecorder()
				_ = h.Handle(w, q.Build(), next)
				var body map[string]any
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
					t.Fatalf("%s: body %q is not JSON: %v", q.Target, w.Body, err)
				}
				return answer{w.Code, w.Header(), body}
			}
			common := func(name string, a answer, code int, typ, key string) {
				t.Helper()
				if a.code != code || a.h.Get("Content-Type") != tc.ct || a.h.Get("Cache-Control") != "no-store" ||
					a.h.Get(middleware.ProblemHeader) != typ || a.h.Get("Idempotency-Key") != key {
					t.Errorf("%s: %d %v", name, a.code, a.h)
				}
			}
			go func() { _ = h.Handle(httptest.NewRecorder(), req{Target: "/slow", Key: "k1", Body: "a"}.Build(), next) }()
			<-started
			a := do(req{Target: "/slow", Key: "k1", Body: "a"})
			common("in flight", a, 409, middleware.ProblemInFlight, "k1")
			if a.h.Get("Retry-After") != "2" {
				t.Errorf("Retry-After %q", a.h.Get("Retry-After"))
			}
			tc.inFlight(t, a)
			a = do(req{Target: "/slow", Key: "k1", Body: "b"})
			common("mismatch", a, 422, middleware.ProblemMismatch, "k1")
			tc.mismatch(t, a)
			close(release)
			// An invalid key is not echoed; a missing one has none to echo.
			common("invalid key", do(req{Key: "a,b", Body: "x"}), 400, middleware.ProblemInvalidKey, "")
			// The outcome-unknown answer, first and replayed, in the same format.
			first := do(req{Target: "/reset", Key: "k2", Body: "x"})
			common("unknown", first, 502, middleware.ProblemOutcomeUnknown, "k2")
			again := do(req{Target: "/reset", Key: "k2", Body: "x"})
			common("unknown replayed", again, 502, middleware.ProblemOutcomeUnknown, "k2")
			if again.h.Get("Idempotent-Replayed") != "true" {
				t.Errorf("unknown replayed: %v", again.h)
			}
			fb, _ := json.Marshal(first.body)
			ab, _ := json.Marshal(again.body)
			if string(fb) != string(ab) {
				t.Errorf("replayed unknown %s, first %s", ab, fb)
			}
		})
	}
}

// handler is a core over a memory store answering in format spec, with opts.
func handler(t *testing.T, spec string, opts ...middleware.Option) *middleware.Handler {
	t.Helper()
	f, err := errformat.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	h, err := middleware.New(store, append([]middleware.Option{func(s *middleware.Settings) { s.ErrorFormat = f }}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

type req = testutil.Req
