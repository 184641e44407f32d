package middleware

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// Every problem the core answers has its gRPC code, and a problem a client may
// retry as it is (Retryable) is UNAVAILABLE, the code retry policies retry; no
// other is.
func TestEveryProblemHasItsGRPCCode(t *testing.T) {
	for typ := range problemTitles {
		c, ok := problemCodes[typ]
		if !ok {
			t.Errorf("%s: no gRPC code", typ)
			continue
		}
		p := newProblem(typ, 400, "")
		if p.Retryable != (c == grpcUnavailable) {
			t.Errorf("%s: retryable %v, code %v", typ, p.Retryable, c)
		}
		if grpcCodeOf(p) != c {
			t.Errorf("%s: grpcCodeOf %v, table %v", typ, grpcCodeOf(p), c)
		}
	}
	for typ := range problemCodes {
		if _, ok := problemTitles[typ]; !ok {
			t.Errorf("%s: a code for a problem the core does not answer", typ)
		}
	}
}

// A problem type the core does not know (the proxy's upstream-unavailable, a
// Go user's own) is UNAVAILABLE when retryable, else what its status means.
func TestGRPCCodeOfOtherProblems(t *testing.T) {
	for _, c := range []struct {
		status    int
		retryable bool
		want      grpcCode
	}{
		{502, true, grpcUnavailable}, {504, true, grpcUnavailable}, {400, true, grpcUnavailable},
		{400, false, grpcInvalidArgument}, {401, false, grpcUnauthenticated}, {403, false, grpcPermissionDenied},
		{404, false, grpcNotFound}, {409, false, grpcAborted}, {413, false, grpcResourceExhausted},
		{429, false, grpcResourceExhausted}, {501, false, grpcUnimplemented}, {503, false, grpcUnavailable},
		{500, false, grpcUnknown}, {418, false, grpcUnknown},
	} {
		p := Problem{Type: "urn:example:own", Status: c.status, Retryable: c.retryable}
		if got := grpcCodeOf(p); got != c.want {
			t.Errorf("%d retryable=%v: %v, want %v", c.status, c.retryable, got, c.want)
		}
	}
}

// The answer is a trailers-only gRPC response: 200, application/grpc, no
// body, the status and its message (percent-encoded) and the metadata in the
// headers, no Content-Length of its own.
func TestGRPCProblemIsTrailersOnly(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("Content-Length", "99") // left by a handler
	p := newProblem(ProblemInFlight, http.StatusConflict, "still running: 100% \"busy\" — ünïcode")
	(&Handler{compiled: &compiled{keyHeader: "Idempotency-Key"}}).writeProblem(w, p, 1500*time.Millisecond, "k-1", true)
	h := w.Header()
	if w.Code != 200 || w.Body.Len() != 0 || h.Get("Content-Type") != "application/grpc" || h.Get("Content-Length") != "" {
		t.Fatalf("%d %q %v", w.Code, w.Body, h)
	}
	if h.Get("Grpc-Status") != strconv.Itoa(int(grpcUnavailable)) || h.Get(ProblemHeader) != ProblemInFlight ||
		h.Get("Idempotency-Key") != "k-1" || h.Get("Retry-After") != "2" || h.Get(grpcPushback) != "1500" {
		t.Fatalf("headers: %v", h)
	}
	if h.Get("Idempotent-Replayed") != "" {
		t.Fatal("a fresh answer is marked replayed")
	}
	msg := h.Get("Grpc-Message")
	for i := 0; i < len(msg); i++ {
		if msg[i] < 0x20 || msg[i] > 0x7e {
			t.Fatalf("grpc-message byte %#x not percent-encoded: %q", msg[i], msg)
		}
	}
	got, err := url.PathUnescape(msg)
	if err != nil || got != p.Title+": "+p.Detail {
		t.Fatalf("grpc-message %q decodes to %q (%v)", msg, got, err)
	}
}

func TestIsGRPCType(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "Application/GRPC+json": true,
		"application/grpc; charset=utf-8": true, " application/grpc ": true,
		"application/grpc-web": false, "application/grpc-web+proto": false, "application/grpc+": false,
		"application/grpcx": false, "application/proto": false, "application/json": false, "": false,
	} {
		if isGRPCType(ct) != want {
			t.Errorf("%q: %v", ct, !want)
		}
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header["Content-Type"] = []string{"application/grpc", "application/json"}
	if IsGRPC(r) {
		t.Error("two Content-Types: a gRPC call")
	}
}

// A gRPC answer's grpc-status, in its trailers or (trailers-only) its
// headers, is what store_statuses reads: as the HTTP status it stands for.
func TestGRPCStatusOf(t *testing.T) {
	grpcCT := http.Header{"Content-Type": {"application/grpc"}}
	with := func(h http.Header, k, v string) http.Header { c := h.Clone(); c.Set(k, v); return c }
	for _, c := range []struct {
		name            string
		status          int
		header, trailer http.Header
		want            int
	}{
		{"ok in trailers", 200, grpcCT, http.Header{"Grpc-Status": {"0"}}, 200},
		{"not found", 200, grpcCT, http.Header{"Grpc-Status": {"5"}}, 404},
		{"unavailable", 200, grpcCT, http.Header{"Grpc-Status": {"14"}}, 503},
		{"trailers-only", 200, with(grpcCT, "Grpc-Status", "13"), nil, 500},
		{"no status", 200, grpcCT, nil, 500},
		{"two statuses", 200, grpcCT, http.Header{"Grpc-Status": {"0", "0"}}, 500},
		{"not a number", 200, grpcCT, http.Header{"Grpc-Status": {"ok"}}, 500},
		{"beyond the codes", 200, grpcCT, http.Header{"Grpc-Status": {"99"}}, 500},
		{"resource exhausted", 200, grpcCT, http.Header{"Grpc-Status": {"8"}}, 429},
		{"not grpc", 200, http.Header{"Content-Type": {"application/json"}}, http.Header{"Grpc-Status": {"14"}}, 200},
		{"grpc-web", 200, http.Header{"Content-Type": {"application/grpc-web"}}, http.Header{"Grpc-Status": {"14"}}, 200},
		{"an HTTP error", 503, grpcCT, nil, 503},
	} {
		rw := &recorder{w: httptest.NewRecorder(), status: c.status, header: c.header}
		for k, v := range c.trailer {
			rw.w.Header()[http.TrailerPrefix+k] = v
		}
		if got := rw.storeStatus(); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
