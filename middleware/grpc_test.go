package middleware_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/middleware"
)

// frame is msg as a gRPC message: flag 0, its length, its bytes.
func frame(msg string) string {
	var b [5]byte
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return string(b[:]) + msg
}

// grpcCall is a gRPC call to method with body, key in the idempotency-key
// metadata when set.
func grpcCall(method, key string, body io.Reader) *http.Request {
	r := httptest.NewRequest("POST", method, body)
	r.Header.Set("Content-Type", "application/grpc")
	r.Header.Set("Te", "trailers")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

// grpcService answers every call with one message and trailers: grpc-status
// is what status holds ("0" unless set), and it counts the calls and the
// bytes it read.
type grpcService struct {
	calls  atomic.Int64
	status atomic.Value // string
	read   atomic.Int64
}

func (s *grpcService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.calls.Add(1)
	b, _ := io.ReadAll(r.Body)
	s.read.Store(int64(len(b)))
	st, _ := s.status.Load().(string)
	if st == "" {
		st = "0"
	}
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("X-Call", string(rune('0'+n)))
	w.WriteHeader(200)
	_, _ = io.WriteString(w, frame("answer"))
	w.Header().Set(http.TrailerPrefix+"Grpc-Status", st)
	w.Header().Set(http.TrailerPrefix+"X-Ledger", "entry")
}

// To a gRPC call, every answer the core writes itself is HTTP 200 with
// grpc-status in a trailers-only answer; the same request without the gRPC
// Content-Type (gRPC-Web, Connect, REST) gets the route's error format.
func TestGRPCCallsGetGRPCAnswers(t *testing.T) {
	svc := &grpcService{}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.RequireKey = true; s.RetryAfter = 250 * time.Millisecond }).Wrap(svc)
	send := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := send(grpcCall("/pkg.Svc/Do", "", strings.NewReader(frame("m"))))
	if w.Code != 200 || w.Header().Get("Grpc-Status") != "3" || w.Body.Len() != 0 ||
		w.Header().Get(middleware.ProblemHeader) != middleware.ProblemMissingKey {
		t.Fatalf("missing key to a gRPC call: %d %v %q", w.Code, w.Header(), w.Body)
	}
	for _, ct := range []string{"application/grpc-web+proto", "application/proto", "application/json"} {
		r := grpcCall("/pkg.Svc/Do", "", strings.NewReader(frame("m")))
		r.Header.Set("Content-Type", ct)
		if w := send(r); w.Code != 400 || w.Header().Get("Grpc-Status") != "" || !strings.Contains(w.Body.String(), "missing-key") {
			t.Fatalf("missing key, %s: %d %v %q", ct, w.Code, w.Header(), w.Body)
		}
	}
	if w := send(grpcCall("/pkg.Svc/Do", "k1", strings.NewReader(frame("m")))); w.Code != 200 || svc.calls.Load() != 1 {
		t.Fatalf("first: %d %v", w.Code, w.Header())
	}
	w = send(grpcCall("/pkg.Svc/Do", "k1", strings.NewReader(frame("other"))))
	if w.Code != 200 || w.Header().Get("Grpc-Status") != "9" || w.Header().Get("Idempotency-Key") != "k1" {
		t.Fatalf("mismatch: %d %v", w.Code, w.Header())
	}
}

// A gRPC answer's grpc-status decides whether it is stored, as the HTTP
// status it stands for: UNAVAILABLE and INTERNAL release the key (the retry
// runs), NOT_FOUND is stored and replayed with its trailers.
func TestGRPCStatusDecidesWhatIsStored(t *testing.T) {
	for _, c := range []struct {
		status string
		stored bool
	}{{"0", true}, {"5", true}, {"14", false}, {"13", false}, {"8", false}} {
		svc := &grpcService{}
		svc.status.Store(c.status)
		h := newHandler(t, newMem(t)).Wrap(svc)
		var last *httptest.ResponseRecorder
		for range 2 {
			last = httptest.NewRecorder()
			h.ServeHTTP(last, grpcCall("/pkg.Svc/Do", "k", strings.NewReader(frame("m"))))
		}
		want := int64(2)
		if c.stored {
			want = 1
		}
		if svc.calls.Load() != want {
			t.Errorf("grpc-status %s: %d executions, want %d", c.status, svc.calls.Load(), want)
		}
		res := last.Result()
		if c.stored && (res.Trailer.Get("Grpc-Status") != c.status || res.Trailer.Get("X-Ledger") != "entry" ||
			last.Header().Get("Idempotent-Replayed") != "true" || last.Header().Get("Trailer") != "" || last.Body.String() != frame("answer")) {
			t.Errorf("grpc-status %s replayed: %v trailers %v body %q", c.status, last.Header(), res.Trailer, last.Body)
		}
	}
}

// A held unknown outcome is answered to a gRPC call as UNKNOWN, and so is
// every retry, marked replayed; a REST retry of the same key gets the route's
// format.
func TestGRPCHeldOutcomeIsUnknown(t *testing.T) {
	next := middleware.NextFunc(func(http.ResponseWriter, *http.Request) error {
		return middleware.MarkOutcomeUnknown(errors.New("connection reset after the request was written"))
	})
	core := newHandler(t, newMem(t))
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		_ = core.Handle(w, r, next)
		return w
	}
	for i := range 3 {
		w := serve(grpcCall("/pkg.Svc/Do", "held", strings.NewReader(frame("m"))))
		if w.Code != 200 || w.Header().Get("Grpc-Status") != "2" || w.Body.Len() != 0 ||
			w.Header().Get(middleware.ProblemHeader) != middleware.ProblemOutcomeUnknown ||
			(w.Header().Get("Idempotent-Replayed") == "true") != (i > 0) {
			t.Fatalf("answer %d: %d %v %q", i, w.Code, w.Header(), w.Body)
		}
	}
	r := grpcCall("/pkg.Svc/Do", "held", strings.NewReader(frame("m")))
	r.Header.Set("Content-Type", "application/grpc-web")
	if w := serve(r); w.Code != 502 || !strings.Contains(w.Body.String(), "outcome-unknown") {
		t.Fatalf("a gRPC-Web retry of the held key: %d %q", w.Code, w.Body)
	}
}

// A call whose body goes on after its first message is a stream: it passes
// through untracked, every byte forwarded as it came, and runs each time. A
// unary call (one message, then the end) is tracked.
func TestGRPCStreamsPassThroughUntracked(t *testing.T) {
	svc := &grpcService{}
	var ev events
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.Observer = ev.Observe }).Wrap(svc)
	two := frame("first") + frame("second")
	for range 2 {
		h.ServeHTTP(httptest.NewRecorder(), grpcCall("/pkg.Svc/Upload", "s", strings.NewReader(two)))
	}
	if svc.calls.Load() != 2 || svc.read.Load() != int64(len(two)) {
		t.Fatalf("client stream: %d executions, %d bytes forwarded of %d", svc.calls.Load(), svc.read.Load(), len(two))
	}
	all := ev.All()
	if all[1].Outcome != middleware.OutcomeBypass || all[1].Err == nil || !strings.Contains(all[1].Err.Error(), "streaming") {
		t.Fatalf("stream event: %+v", all[1])
	}
	for range 2 {
		h.ServeHTTP(httptest.NewRecorder(), grpcCall("/pkg.Svc/Do", "u", strings.NewReader(frame("only"))))
	}
	if svc.calls.Load() != 3 {
		t.Fatalf("unary call: %d executions in all, want 3", svc.calls.Load())
	}
}

// A stream that sends its first message and then waits for the server (a
// bidirectional call) is forwarded once the grace passes without the end of
// its stream, whatever body_read_timeout is: its next message, sent after,
// still reaches the upstream.
func TestGRPCWaitingStreamPassesThrough(t *testing.T) {
	svc := &grpcService{}
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.BodyReadTimeout = 20 * time.Millisecond }).Wrap(svc)
	pr, pw := io.Pipe()
	var gaveUp atomic.Bool
	go func() {
		_, _ = io.WriteString(pw, frame("hello"))
		// The second message only once the upstream runs: the core
		// must have let the stream through without it. (A core that
		// waits for the end of the body never runs it: the writer gives
		// up after a while and sends it anyway.)
		for i := 0; svc.calls.Load() == 0; i++ {
			if i == 10000 {
				gaveUp.Store(true)
				break
			}
			time.Sleep(time.Millisecond)
		}
		_, _ = io.WriteString(pw, frame("later"))
		pw.Close()
	}()
	h.ServeHTTP(httptest.NewRecorder(), grpcCall("/pkg.Svc/Chat", "c", pr))
	if gaveUp.Load() || svc.calls.Load() != 1 || svc.read.Load() != int64(len(frame("hello")+frame("later"))) {
		t.Fatalf("%d executions, %d bytes forwarded, the upstream ran before the second message: %v", svc.calls.Load(), svc.read.Load(), !gaveUp.Load())
	}
}

// A tracked gRPC call goes upstream without its grpc-timeout: the client's
// deadline must not cancel the call whose answer its retry will ask for. An
// untracked one keeps it.
func TestGRPCTimeoutNotForwardedOnATrackedCall(t *testing.T) {
	var seen []string
	h := newHandler(t, newMem(t)).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Grpc-Timeout"))
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "0")
	}))
	for _, key := range []string{"k", ""} {
		r := grpcCall("/pkg.Svc/Do", key, strings.NewReader(frame("m")))
		r.Header.Set("Grpc-Timeout", "200m")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if len(seen) != 2 || seen[0] != "" || seen[1] != "200m" {
		t.Fatalf("grpc-timeout upstream: tracked %q, untracked %q", seen[0], seen[1])
	}
}
