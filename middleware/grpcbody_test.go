package middleware_test

import (
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/middleware"
)

// keyed is a request message whose field 1 is the string key.
func keyed(key string) string { return "\x0a" + string(rune(len(key))) + key }

// prefix is a gRPC message prefix declaring n bytes.
func prefix(n int) string { return frame(strings.Repeat("x", n))[:5] }

// A keyed call whose body is one message and then anything at all (the start
// of a prefix, a prefix and less than it declares, a second message on a
// route keyed from the message) is refused with INVALID_ARGUMENT before it
// reaches the upstream, however often it is sent: it is not a unary call, and
// passing it through as a stream let a unary method run again for each copy.
// With the key in metadata, a body that ends inside a message is refused as
// well; whole messages after the first are a client stream (below).
func TestGRPCOneMessageThenSomethingIsRefused(t *testing.T) {
	msg := frame(keyed("key-1"))
	for _, c := range []struct {
		name, source, key, body string
	}{
		{"partial prefix", "proto:1", "", msg + "\x00\x00\x00"},
		{"one byte", "proto:1", "", msg + "\x00"},
		{"prefix, short message", "proto:1", "", msg + prefix(10) + "abc"},
		{"prefix alone", "proto:1", "", msg + prefix(3)},
		{"second message", "proto:1", "", msg + frame(keyed("key-1"))},
		{"empty second message", "proto:1", "", msg + frame("")},
		{"metadata key, partial prefix", "", "m-1", msg + "\x00\x00\x00"},
		{"metadata key, short message", "", "m-2", msg + prefix(10) + "abc"},
		{"metadata key, prefix alone", "", "m-3", msg + prefix(7)},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := &grpcService{}
			h := newHandler(t, newMem(t), keySourceOpt(c.source), func(s *middleware.Settings) { s.RequireKey = true }).Wrap(svc)
			for i := range 2 {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, grpcCall("/pkg.Svc/Create", c.key, strings.NewReader(c.body)))
				if got := rec.Header().Get("Grpc-Status"); got != "3" {
					t.Fatalf("call %d: grpc-status %q, want 3 (INVALID_ARGUMENT); headers %v", i+1, got, rec.Header())
				}
			}
			if n := svc.calls.Load(); n != 0 {
				t.Fatalf("the upstream ran %d times", n)
			}
		})
	}
}

// A keyed stream that sends its first message and then waits for the server
// (a bidirectional call) is decided within a few milliseconds at the default
// settings, not after body_read_timeout: the upstream runs while the client
// still waits, and gets the next message. A stream is never stored: the
// same key runs again.
func TestGRPCWaitingStreamIsDecidedSoon(t *testing.T) {
	svc := &grpcService{}
	h := newHandler(t, newMem(t)).Wrap(svc)
	for i := range 2 {
		pr, pw := io.Pipe()
		var waited atomic.Int64
		go func() {
			_, _ = io.WriteString(pw, frame("hello"))
			t0 := time.Now()
			for svc.calls.Load() == int64(i) && time.Since(t0) < 5*time.Second {
				time.Sleep(time.Millisecond)
			}
			waited.Store(int64(time.Since(t0)))
			_, _ = io.WriteString(pw, frame("later"))
			pw.Close()
		}()
		h.ServeHTTP(httptest.NewRecorder(), grpcCall("/pkg.Svc/Chat", "chat", pr))
		if w := time.Duration(waited.Load()); w > 2*time.Second || svc.read.Load() != int64(len(frame("hello")+frame("later"))) {
			t.Fatalf("call %d: the client waited %v for the upstream; %d bytes forwarded", i+1, w, svc.read.Load())
		}
	}
	if n := svc.calls.Load(); n != 2 {
		t.Fatalf("the stream ran %d times, want 2 (a stream is not stored)", n)
	}
}

// A unary call whose end of stream comes after its message, later than the
// grace (a loaded machine, a slow client), is still a unary call: tracked,
// run once, replayed. Many at once, each end delayed differently.
func TestGRPCLateEndIsStillTracked(t *testing.T) {
	svc := &grpcService{}
	var ev events
	h := newHandler(t, newMem(t), func(s *middleware.Settings) { s.Observer = ev.Observe }).Wrap(svc)
	const calls = 24
	var wg sync.WaitGroup
	errs := make(chan error, 2*calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("late-%d", i)
			for try := range 2 {
				pr, pw := io.Pipe()
				go func() {
					_, _ = io.WriteString(pw, frame("pay "+key))
					time.Sleep(time.Duration(i%6) * 15 * time.Millisecond) // 0 to 75 ms
					pw.Close()
				}()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, grpcCall("/pkg.Svc/Pay", key, pr))
				if replayed := rec.Header().Get("Idempotent-Replayed") == "true"; replayed != (try == 1) {
					errs <- fmt.Errorf("%s call %d: replayed %v; headers %v", key, try+1, replayed, rec.Header())
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := svc.calls.Load(); n != calls {
		t.Fatalf("%d executions of %d calls", n, calls)
	}
}

// A keyed stream cancelled by its client before its first message (grpc-go's
// cancel_after_begin) is not forwarded, and nothing is stored for its key;
// one cancelled after its first message and before its end is not stored
// as the call's answer either when the upstream did not answer it whole.
func TestGRPCCancelledBeforeFirstMessageIsNotRun(t *testing.T) {
	svc := &grpcService{}
	h := newHandler(t, newMem(t)).Wrap(svc)
	pr, pw := io.Pipe()
	go func() {
		time.Sleep(10 * time.Millisecond)
		pw.CloseWithError(errors.New("http2: stream closed"))
	}()
	h.ServeHTTP(httptest.NewRecorder(), grpcCall("/pkg.Svc/Upload", "cancelled", pr))
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("the cancelled call was forwarded (%d executions)", n)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, grpcCall("/pkg.Svc/Upload", "cancelled", strings.NewReader(frame("now"))))
	if svc.calls.Load() != 1 || rec.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("the key after a cancelled call: %d executions, headers %v", svc.calls.Load(), rec.Header())
	}
}

// On a route keyed from the message, bytes that come after the grace, once
// the call was forwarded, are not forwarded: the upstream's body fails, and
// the call settles as a unary one (its answer stored, or held): sent twice,
// it runs once.
func TestGRPCLateBytesOnAMessageKeyedRouteRunOnce(t *testing.T) {
	svc := &grpcService{}
	h := newHandler(t, newMem(t), keySourceOpt("proto:1"), func(s *middleware.Settings) { s.RequireKey = true }).Wrap(svc)
	for range 2 {
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, frame(keyed("late-junk")))
			time.Sleep(30 * time.Millisecond)
			_, _ = io.WriteString(pw, "\x00\x00\x00")
			pw.Close()
		}()
		h.ServeHTTP(httptest.NewRecorder(), grpcCall("/pkg.Svc/Create", "", pr))
	}
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
	if got := svc.read.Load(); got != int64(len(frame(keyed("late-junk")))) {
		t.Fatalf("the upstream read %d bytes", got)
	}
}
