package middleware_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/middleware"
)

type step struct {
	req        req
	wantStatus int
	wantType   string // problem type, for problem answers
	wantReplay bool
	wantBody   string // substring
}

func TestProtocol(t *testing.T) {
	long := strings.Repeat("k", 256)
	tests := []struct {
		name      string
		opts      []middleware.Option
		answer    func(w http.ResponseWriter, r *http.Request) // nil: 201 "call N body …"
		steps     []step
		wantCalls int64
		wantLast  middleware.Outcome
	}{
		{
			name: "first runs, repeat replays",
			steps: []step{
				{req: req{Key: "k1", Body: "a"}, wantStatus: 201, wantBody: "call 1 body a"},
				{req: req{Key: "k1", Body: "a"}, wantStatus: 201, wantReplay: true, wantBody: "call 1 body a"},
				{req: req{Key: "k1", Body: "a"}, wantStatus: 201, wantReplay: true, wantBody: "call 1 body a"},
			},
			wantCalls: 1, wantLast: middleware.OutcomeReplayed,
		},
		{
			name: "quoted sf-string and bare key are the same key",
			steps: []step{
				{req: req{Key: `"k\"1"`}, wantStatus: 201},
				{req: req{Key: `k"1`}, wantStatus: 201, wantReplay: true},
			},
			wantCalls: 1,
		},
		{
			name: "PATCH is tracked",
			steps: []step{
				{req: req{Method: "PATCH", Key: "k"}, wantStatus: 201},
				{req: req{Method: "PATCH", Key: "k"}, wantStatus: 201, wantReplay: true},
			},
			wantCalls: 1,
		},
		{
			name: "untracked method passes through, key or not",
			steps: []step{
				{req: req{Method: "GET", Key: "k"}, wantStatus: 201},
				{req: req{Method: "GET", Key: "k"}, wantStatus: 201},
				{req: req{Method: "PUT", Key: "k"}, wantStatus: 201},
				{req: req{Method: "DELETE", Key: ""}, wantStatus: 201},
			},
			wantCalls: 4,
		},
		{
			name:      "configured methods",
			opts:      []middleware.Option{func(s *middleware.Settings) { s.Methods = []string{"PUT"} }},
			steps:     []step{{req: req{Method: "PUT", Key: "k"}, wantStatus: 201}, {req: req{Method: "PUT", Key: "k"}, wantStatus: 201, wantReplay: true}, {req: req{Key: "k"}, wantStatus: 201}},
			wantCalls: 2,
		},
		{
			name:      "missing key passes through unstored",
			steps:     []step{{req: req{}, wantStatus: 201}, {req: req{}, wantStatus: 201}},
			wantCalls: 2, wantLast: middleware.OutcomeBypass,
		},
		{
			name:      "missing key when required",
			opts:      []middleware.Option{func(s *middleware.Settings) { s.RequireKey = true }},
			steps:     []step{{req: req{}, wantStatus: 400, wantType: middleware.ProblemMissingKey}, {req: req{Method: "GET"}, wantStatus: 201}},
			wantCalls: 1,
		},
		{
			name: "invalid keys",
			opts: []middleware.Option{func(s *middleware.Settings) { s.RequireKey = true }},
			steps: []step{
				{req: req{Header: http.Header{"Idempotency-Key": {""}}}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Header: http.Header{"Idempotency-Key": {"a", "b"}}}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: "a,b"}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: long}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: "ключ"}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: "a\tb"}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: `"unterminated`}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: `""`}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: `"a";p=1`}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
			},
			wantCalls: 0, wantLast: middleware.OutcomeInvalid,
		},
		{
			name: "min_key_length refuses shorter keys from any key source",
			opts: []middleware.Option{func(s *middleware.Settings) { s.MinKeyLength = 36 }},
			steps: []step{
				{req: req{Key: long[:35]}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: `"` + long[:35] + `"`}, wantStatus: 400, wantType: middleware.ProblemInvalidKey},
				{req: req{Key: long[:36]}, wantStatus: 201},
				{req: req{Key: long[:36]}, wantStatus: 201, wantReplay: true},
			},
			wantCalls: 1,
		},
		{
			name:      "255-character key is fine",
			steps:     []step{{req: req{Key: long[:255]}, wantStatus: 201}, {req: req{Key: long[:255]}, wantStatus: 201, wantReplay: true}},
			wantCalls: 1,
		},
		{
			name: "mismatch: body, path, query, method",
			steps: []step{
				{req: req{Key: "k", Body: "a"}, wantStatus: 201},
				{req: req{Key: "k", Body: "b"}, wantStatus: 422, wantType: middleware.ProblemMismatch},
				{req: req{Key: "k", Body: "a", Target: "/other"}, wantStatus: 422, wantType: middleware.ProblemMismatch},
				{req: req{Key: "k", Body: "a", Target: "/charge?x=1"}, wantStatus: 422, wantType: middleware.ProblemMismatch},
				{req: req{Key: "k", Body: "a", Method: "PATCH"}, wantStatus: 422, wantType: middleware.ProblemMismatch},
				{req: req{Key: "k", Body: "a"}, wantStatus: 201, wantReplay: true},
			},
			wantCalls: 1,
		},
		{
			name:      "5xx is not stored",
			answer:    func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) },
			steps:     []step{{req: req{Key: "k"}, wantStatus: 503}, {req: req{Key: "k"}, wantStatus: 503}},
			wantCalls: 2, wantLast: middleware.OutcomeNotStored,
		},
		{
			name:      "408 is not stored",
			answer:    func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(408) },
			steps:     []step{{req: req{Key: "k"}, wantStatus: 408}, {req: req{Key: "k"}, wantStatus: 408}},
			wantCalls: 2,
		},
		{
			name:      "425 is not stored",
			answer:    func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(425) },
			steps:     []step{{req: req{Key: "k"}, wantStatus: 425}, {req: req{Key: "k"}, wantStatus: 425}},
			wantCalls: 2,
		},
		{
			name:      "429 is not stored",
			answer:    func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(429) },
			steps:     []step{{req: req{Key: "k"}, wantStatus: 429}, {req: req{Key: "k"}, wantStatus: 429}},
			wantCalls: 2,
		},
		{
			name: "4xx is stored",
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(404)
				_, _ = w.Write([]byte("no such card"))
			},
			steps:     []step{{req: req{Key: "k"}, wantStatus: 404}, {req: req{Key: "k"}, wantStatus: 404, wantReplay: true, wantBody: "no such card"}},
			wantCalls: 1,
		},
		{
			name:      "handler that writes nothing stores 200",
			answer:    func(w http.ResponseWriter, r *http.Request) {},
			steps:     []step{{req: req{Key: "k"}, wantStatus: 200}, {req: req{Key: "k"}, wantStatus: 200, wantReplay: true}},
			wantCalls: 1,
		},
		{
			name:      "configured statuses",
			opts:      []middleware.Option{func(s *middleware.Settings) { s.StoreStatuses = mustStatuses(t, "2xx") }},
			answer:    func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) },
			steps:     []step{{req: req{Key: "k"}, wantStatus: 404}, {req: req{Key: "k"}, wantStatus: 404}},
			wantCalls: 2,
		},
		{
			name:      "request body too large",
			opts:      []middleware.Option{func(s *middleware.Settings) { s.MaxRequestBody = 4 }},
			steps:     []step{{req: req{Key: "k", Body: "12345"}, wantStatus: 413, wantType: middleware.ProblemBodyTooLarge}, {req: req{Key: "k2", Body: "1234"}, wantStatus: 201}},
			wantCalls: 1,
		},
		{
			name: "response too large to store is remembered, not re-run",
			opts: []middleware.Option{func(s *middleware.Settings) { s.MaxBody = 8 }},
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(200)
				_, _ = w.Write([]byte("0123456789"))
			},
			steps: []step{
				{req: req{Key: "k"}, wantStatus: 200, wantBody: "0123456789"},
				{req: req{Key: "k"}, wantStatus: 409, wantType: middleware.ProblemNotReplayable, wantBody: `"original_status":200`},
			},
			wantCalls: 1, wantLast: middleware.OutcomeNotReplayable,
		},
		{
			name: "scope: Authorization separates clients",
			steps: []step{
				{req: req{Key: "k", Header: http.Header{"Authorization": {"Bearer alice"}}}, wantStatus: 201, wantBody: "call 1"},
				{req: req{Key: "k", Header: http.Header{"Authorization": {"Bearer bob"}}}, wantStatus: 201, wantBody: "call 2"},
				{req: req{Key: "k", Header: http.Header{"Authorization": {"Bearer alice"}}}, wantStatus: 201, wantReplay: true, wantBody: "call 1"},
				{req: req{Key: "k"}, wantStatus: 201, wantBody: "call 3"},
			},
			wantCalls: 3,
		},
		{
			name: "scope: Host separates sites",
			steps: []step{
				{req: req{Key: "k", Target: "http://a.example/charge"}, wantStatus: 201},
				{req: req{Key: "k", Target: "http://b.example/charge"}, wantStatus: 201, wantBody: "call 2"},
			},
			wantCalls: 2,
		},
		{
			name: "scope: configured headers",
			opts: []middleware.Option{func(s *middleware.Settings) { s.ScopeHeaders = []string{"X-Tenant"} }},
			steps: []step{
				{req: req{Key: "k", Header: http.Header{"X-Tenant": {"a"}, "Authorization": {"x"}}}, wantStatus: 201},
				{req: req{Key: "k", Header: http.Header{"X-Tenant": {"a"}, "Authorization": {"y"}}}, wantStatus: 201, wantReplay: true},
				{req: req{Key: "k", Header: http.Header{"X-Tenant": {"b"}}}, wantStatus: 201, wantBody: "call 2"},
			},
			wantCalls: 2,
		},
		{
			name: "scope: function",
			opts: []middleware.Option{func(s *middleware.Settings) {
				s.ScopeFunc = func(r *http.Request) string { return r.Header.Get("X-Org") }
			}},
			steps: []step{
				{req: req{Key: "k", Target: "http://a.example/charge", Header: http.Header{"X-Org": {"1"}}}, wantStatus: 201},
				{req: req{Key: "k", Target: "http://b.example/charge", Header: http.Header{"X-Org": {"1"}}}, wantStatus: 201, wantReplay: true},
			},
			wantCalls: 1,
		},
		{
			name: "fingerprint headers",
			opts: []middleware.Option{func(s *middleware.Settings) { s.FingerprintHeaders = []string{"X-Amount-Currency"} }},
			steps: []step{
				{req: req{Key: "k", Header: http.Header{"X-Amount-Currency": {"EUR"}}}, wantStatus: 201},
				{req: req{Key: "k", Header: http.Header{"X-Amount-Currency": {"USD"}}}, wantStatus: 422, wantType: middleware.ProblemMismatch},
			},
			wantCalls: 1,
		},
		{
			name: "fingerprint function",
			opts: []middleware.Option{func(s *middleware.Settings) {
				s.FingerprintFunc = func(r *http.Request, body []byte) string { return r.URL.Path }
			}},
			steps: []step{
				{req: req{Key: "k", Body: "a"}, wantStatus: 201},
				{req: req{Key: "k", Body: "b"}, wantStatus: 201, wantReplay: true},
			},
			wantCalls: 1,
		},
		{
			name: "key header name",
			opts: []middleware.Option{func(s *middleware.Settings) { s.KeyHeader = "X-Request-Id" }},
			steps: []step{
				{req: req{Header: http.Header{"X-Request-Id": {"r1"}}}, wantStatus: 201},
				{req: req{Header: http.Header{"X-Request-Id": {"r1"}}}, wantStatus: 201, wantReplay: true},
				{req: req{Key: "r1"}, wantStatus: 201, wantBody: "call 2"},
			},
			wantCalls: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &counter{Fn: tc.answer}
			var evs events
			h := newHandler(t, newMem(t), append(tc.opts, func(s *middleware.Settings) { s.Observer = evs.Observe })...).Wrap(c)
			for i, s := range tc.steps {
				w := serve(h, s.req)
				if w.Code != s.wantStatus {
					t.Fatalf("step %d: status %d, want %d; body %s", i, w.Code, s.wantStatus, w.Body)
				}
				if got := w.Header().Get("Idempotent-Replayed") == "true"; got != s.wantReplay {
					t.Fatalf("step %d: replayed = %v, want %v", i, got, s.wantReplay)
				}
				if s.wantBody != "" && !strings.Contains(w.Body.String(), s.wantBody) {
					t.Fatalf("step %d: body %q does not contain %q", i, w.Body, s.wantBody)
				}
				if s.wantType != "" {
					checkProblem(t, w.Header(), w.Body.Bytes(), s.wantStatus, s.wantType)
				}
			}
			if got := c.Calls.Load(); got != tc.wantCalls {
				t.Fatalf("next ran %d times, want %d", got, tc.wantCalls)
			}
			if tc.wantLast != "" {
				o := evs.Outcomes()
				if len(o) == 0 || o[len(o)-1] != tc.wantLast {
					t.Fatalf("outcomes %v, want last %q", o, tc.wantLast)
				}
			}
		})
	}
}

func checkProblem(t *testing.T, h http.Header, body []byte, status int, typ string) {
	t.Helper()
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p middleware.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem = %+v, want type %s status %d with title and detail", p, typ, status)
	}
	if (typ == middleware.ProblemInFlight || typ == middleware.ProblemStoreUnavailable) != (h.Get("Retry-After") != "") {
		t.Fatalf("Retry-After = %q for %s", h.Get("Retry-After"), typ)
	}
}

func mustStatuses(t *testing.T, specs ...string) middleware.StatusSet {
	s, err := middleware.ParseStatuses(specs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseStatuses(t *testing.T) {
	def := middleware.DefaultSettings().StoreStatuses
	for code, want := range map[int]bool{200: true, 201: true, 404: true, 499: true, 408: false, 425: false, 429: false, 500: false, 503: false, 101: false, 100: false} {
		if def.Has(code) != want {
			t.Errorf("default has %d = %v, want %v", code, !want, want)
		}
	}
	s := mustStatuses(t, "2xx", "404-405, 409", "!204")
	for code, want := range map[int]bool{200: true, 299: true, 204: false, 404: true, 405: true, 409: true, 406: false, 500: false} {
		if s.Has(code) != want {
			t.Errorf("set has %d = %v, want %v", code, !want, want)
		}
	}
	excl := mustStatuses(t, "!404")
	if excl.Has(404) || !excl.Has(200) || excl.Has(429) {
		t.Error("exclusions alone should start from the default")
	}
	for _, bad := range []string{"", "abc", "99", "600", "6xx", "300-200", "2x", "!"} {
		if _, err := middleware.ParseStatuses(bad); err == nil {
			t.Errorf("ParseStatuses(%q) accepted", bad)
		}
	}
}

func TestBadOptions(t *testing.T) {
	store := newMem(t)
	for name, opt := range map[string]middleware.Option{
		"no methods":      func(s *middleware.Settings) { s.Methods = []string{} },
		"lower method":    func(s *middleware.Settings) { s.Methods = []string{"post"} },
		"bad key header":  func(s *middleware.Settings) { s.KeyHeader = "Bad Header" },
		"empty header":    func(s *middleware.Settings) { s.KeyHeader = "" },
		"bad scope":       func(s *middleware.Settings) { s.ScopeHeaders = []string{"a:b"} },
		"zero ttl":        func(s *middleware.Settings) { s.TTL = 0 },
		"tiny lock ttl":   func(s *middleware.Settings) { s.ClaimTTL = 1 },
		"min key 0":       func(s *middleware.Settings) { s.MinKeyLength = 0 },
		"min key 256":     func(s *middleware.Settings) { s.MinKeyLength = 256 },
		"negative body":   func(s *middleware.Settings) { s.MaxRequestBody = -1 },
		"negative stored": func(s *middleware.Settings) { s.MaxBody = -1 },
		"no statuses":     func(s *middleware.Settings) { s.StoreStatuses = middleware.StatusSet{} },
		"store timeout":   func(s *middleware.Settings) { s.StoreTimeout = 0 },
	} {
		if _, err := middleware.New(store, opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := middleware.New(nil); err == nil {
		t.Error("New(nil store) accepted")
	}
}
