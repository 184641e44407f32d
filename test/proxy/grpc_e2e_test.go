package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/idemproxy/idemproxy/internal/faultproxy"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/test/grpctest"
)

// The gRPC end-to-end tests: a real grpc-go client, its retry policy on,
// through the built proxy (h2c on its plain listener) to a real grpc-go server
// (an h2c:// upstream) that counts its executions (docs/grpc.md).

// grpcCtx bounds one test's calls.
func grpcCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// noRetry dials without the retry policy: a test sees each answer as it is.
var noRetry = grpc.WithDisableRetry()

// problemOf is the Idempotency-Problem a core answer carries (trailers-only:
// in the trailer metadata).
func problemOf(r grpctest.Result) string {
	return strings.TrimPrefix(first(r.Trailer, "idempotency-problem"), middleware.ProblemTypeBase)
}

func first(md metadata.MD, name string) string {
	if v := md.Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// sameMetadata compares two answers' metadata: the trailers exactly, the
// headers but for date (the proxy's own, per answer) and the replay's mark.
func sameMetadata(t *testing.T, a, b grpctest.Result) {
	t.Helper()
	strip := func(md metadata.MD) metadata.MD {
		c := md.Copy()
		delete(c, "date")
		delete(c, "idempotent-replayed")
		return c
	}
	if fmt.Sprint(strip(a.Header)) != fmt.Sprint(strip(b.Header)) || fmt.Sprint(a.Trailer) != fmt.Sprint(b.Trailer) {
		t.Fatalf("metadata differ:\n first %v\n       %v\nreplay %v\n       %v", a.Header, a.Trailer, b.Header, b.Trailer)
	}
}

// A call whose answer is lost on its way to the client (its connection cut
// while the server runs it) is retried by grpc-go's retry policy: the retry
// finds the call in flight (UNAVAILABLE with grpc-retry-pushback-ms, which
// the policy honours), then its stored answer, replayed; the server ran it
// once.
func TestE2EGRPCLostAnswerIsReplayed(t *testing.T) {
	skipShort(t)
	var fp *faultproxy.Proxy
	var once sync.Once
	srv := &grpctest.Server{Started: func(c grpctest.Charge) {
		if c.RequestID == "lost" {
			once.Do(func() {
				fp.ResetAll()                      // the client's connection: its answer is lost
				time.Sleep(150 * time.Millisecond) // the retry arrives while the call runs
			})
		}
	}}
	p := start(t, "--upstream", "h2c://"+grpctest.Start(t, srv), "--retry-after", "100ms")
	var err error
	if fp, err = faultproxy.New(p.Addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	conn := grpctest.Dial(t, fp.Addr(), grpc.WithConnectParams(grpc.ConnectParams{ // reconnect at once
		Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}}))
	ctx := grpcCtx(t)
	t0 := time.Now()
	r := grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{RequestID: "lost", Amount: 7}, "k-lost")
	t.Logf("the call took %v", time.Since(t0))
	if r.Err != nil || first(r.Header, "idempotent-replayed") != "true" || r.Receipt.Execution != 1 || r.Receipt.ID != "ch_lost_1" {
		t.Fatalf("the retried call: %v", r)
	}
	if n := srv.Executions("lost"); n != 1 {
		t.Fatalf("the server ran the call %d times", n)
	}
	again := grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{RequestID: "lost", Amount: 7}, "k-lost")
	sameMetadata(t, r, again)
	if again.Receipt != r.Receipt || srv.Executions("lost") != 1 {
		t.Fatalf("a later retry: %v", again)
	}
}

// A replay carries the first answer's metadata and trailers byte for byte
// (binary ones included), its status, message and details, whatever the
// answer: a message and trailers, an error after header metadata, a
// trailers-only error. A status that means "not executed, retry"
// (UNAVAILABLE) is not stored: the retry runs again.
func TestE2EGRPCReplayIsByteIdentical(t *testing.T) {
	skipShort(t)
	srv := &grpctest.Server{}
	p := start(t, "--upstream", "h2c://"+grpctest.Start(t, srv))
	conn := grpctest.Dial(t, p.Addr, noRetry)
	ctx := grpcCtx(t)
	for _, c := range []struct {
		name, behavior string
		code           codes.Code
		stored         bool
	}{
		{"ok", "", codes.OK, true},
		{"not found after metadata", "fail:5", codes.NotFound, true},
		{"trailers-only failed precondition", "reject:9", codes.FailedPrecondition, true},
		{"unavailable", "fail:14", codes.Unavailable, false},
		{"internal trailers-only", "reject:13", codes.Internal, false},
	} {
		id := strings.ReplaceAll(c.name, " ", "-")
		call := func() grpctest.Result {
			return grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{RequestID: id, Amount: 3, Behavior: c.behavior}, "k-"+id)
		}
		a, b := call(), call()
		if a.Code != c.code || b.Code != c.code {
			t.Fatalf("%s: %v\n%v", c.name, a, b)
		}
		if !c.stored {
			if srv.Executions(id) != 2 || first(b.Header, "idempotent-replayed") != "" {
				t.Fatalf("%s: %d executions, replay %v; want the retry run", c.name, srv.Executions(id), b)
			}
			continue
		}
		replayed := first(b.Header, "idempotent-replayed")
		if replayed == "" {
			replayed = first(b.Trailer, "idempotent-replayed") // a trailers-only answer
		}
		if srv.Executions(id) != 1 || replayed != "true" || a.Message != b.Message || a.Receipt != b.Receipt {
			t.Fatalf("%s: %d executions, replay %v", c.name, srv.Executions(id), b)
		}
		if c.code != codes.OK && (len(b.Trailer.Get("grpc-status-details-bin")) == 0 || !strings.Contains(b.Message, "ünïcode")) {
			t.Fatalf("%s: details or message not as sent: %v", c.name, b)
		}
		strip := func(r grpctest.Result) grpctest.Result {
			r.Trailer = r.Trailer.Copy()
			delete(r.Trailer, "idempotent-replayed")
			return r
		}
		sameMetadata(t, strip(a), strip(b))
	}
}

// Every answer the core makes reaches a gRPC client as the code docs/grpc.md
// documents, with Idempotency-Problem in its metadata; none is an HTTP status
// the client reads as a transport failure.
func TestE2EGRPCErrorCodes(t *testing.T) {
	skipShort(t)
	srv := &grpctest.Server{}
	addr := grpctest.Start(t, srv)
	ctx := grpcCtx(t)
	call := func(conn *grpc.ClientConn, c grpctest.Charge, key string, opts ...grpc.CallOption) grpctest.Result {
		return grpctest.Call(ctx, conn, grpctest.Create, c, key, opts...)
	}
	check := func(what string, r grpctest.Result, code codes.Code, problem string) {
		t.Helper()
		if r.Code != code || problemOf(r) != problem {
			t.Fatalf("%s: %v; want %v and %s", what, r, code, problem)
		}
		if want := codes.Code(middleware.GRPCCodeOf(middleware.Problem{Type: middleware.ProblemTypeBase + problem})); problem != "upstream-unavailable" && code != want {
			t.Fatalf("%s: the test wants %v, the core's table %v", what, code, want)
		}
	}

	p := start(t, "--upstream", "h2c://"+addr, "--require-key", "--max-request-body", "200B", "--max-body", "30B", "--retry-after", "250ms")
	conn := grpctest.Dial(t, p.Addr, noRetry)
	check("no key", call(conn, grpctest.Charge{RequestID: "nokey"}, ""), codes.InvalidArgument, "missing-key")
	check("invalid key", call(conn, grpctest.Charge{RequestID: "badkey"}, "two words"), codes.InvalidArgument, "invalid-key")
	check("too large", call(conn, grpctest.Charge{RequestID: "big", Note: strings.Repeat("n", 300)}, "k-big"), codes.ResourceExhausted, "body-too-large")
	if r := call(conn, grpctest.Charge{RequestID: "mm", Amount: 1}, "k-mm"); r.Code != codes.OK {
		t.Fatalf("first call: %v", r)
	}
	check("key reused", call(conn, grpctest.Charge{RequestID: "mm", Amount: 2}, "k-mm"), codes.FailedPrecondition, "mismatch")
	done := make(chan grpctest.Result, 1)
	go func() { done <- call(conn, grpctest.Charge{RequestID: "slow", Behavior: "slow:1s"}, "k-slow") }()
	testutil.Eventually(t, 10*time.Second, "the slow call to start", func() bool { return srv.Executions("slow") == 1 })
	r := call(conn, grpctest.Charge{RequestID: "slow", Behavior: "slow:1s"}, "k-slow")
	check("in flight", r, codes.Unavailable, "in-flight")
	if first(r.Trailer, "grpc-retry-pushback-ms") != "250" || first(r.Trailer, "retry-after") != "1" || first(r.Trailer, "idempotency-key") != "k-slow" {
		t.Fatalf("in flight: %v", r)
	}
	if r := <-done; r.Code != codes.OK {
		t.Fatalf("the slow call: %v", r)
	}
	// A receipt longer than max_body: remembered as done, not replayable.
	if r := call(conn, grpctest.Charge{RequestID: "a-rather-long-request-id"}, "k-over"); r.Code != codes.OK {
		t.Fatalf("first oversize call: %v", r)
	}
	check("not replayable", call(conn, grpctest.Charge{RequestID: "a-rather-long-request-id"}, "k-over"), codes.AlreadyExists, "not-replayable")

	// The upstream cannot be reached: the call never left, the key is
	// released, UNAVAILABLE.
	down := start(t, "--upstream", "h2c://"+testutil.FreeAddr(t))
	check("upstream down", call(grpctest.Dial(t, down.Addr, noRetry), grpctest.Charge{RequestID: "down"}, "k-down"), codes.Unavailable, "upstream-unavailable")

	// handler_timeout: held as an unknown outcome, UNKNOWN, and so is every
	// retry, marked replayed; the call is not run again.
	ht := start(t, "--upstream", "h2c://"+addr, "--handler-timeout", "300ms")
	htc := grpctest.Dial(t, ht.Addr, noRetry)
	for i := range 3 {
		r := call(htc, grpctest.Charge{RequestID: "timeout", Behavior: "slow:2s"}, "k-timeout")
		check("handler timeout", r, codes.Unknown, "outcome-unknown")
		if (first(r.Trailer, "idempotent-replayed") == "true") != (i > 0) {
			t.Fatalf("handler timeout, answer %d: %v", i, r)
		}
	}
	if n := srv.Executions("timeout"); n != 1 {
		t.Fatalf("handler timeout: %d executions", n)
	}

	// The store is down: UNAVAILABLE, nothing forwarded.
	rs := redistest.Start(t)
	sp := start(t, "--upstream", "h2c://"+addr, "--store", rs.URL(), "--store-timeout", "500ms")
	spc := grpctest.Dial(t, sp.Addr, noRetry)
	rs.Stop()
	check("store down", call(spc, grpctest.Charge{RequestID: "store"}, "k-store"), codes.Unavailable, "store-unavailable")
	if n := srv.Executions("store"); n != 0 {
		t.Fatalf("store down: %d executions", n)
	}
}

// The server dies (SIGKILL) while it runs a call: the outcome is unknown, the
// key is held, and the call and every retry are answered UNKNOWN, never sent
// again.
func TestE2EGRPCServerKilledMidCallIsHeld(t *testing.T) {
	skipShort(t)
	up, addr := grpctest.StartProcess(t, testutil.Build(t, "../grpctest/grpcupstream"))
	direct := grpctest.Dial(t, addr, noRetry)
	p := start(t, "--upstream", "h2c://"+addr)
	conn := grpctest.Dial(t, p.Addr, noRetry)
	ctx := grpcCtx(t)
	c := grpctest.Charge{RequestID: "killed", Behavior: "hang"}
	done := make(chan grpctest.Result, 1)
	go func() { done <- grpctest.Call(ctx, conn, grpctest.Create, c, "k-killed") }()
	testutil.Eventually(t, 10*time.Second, "the call to run", func() bool { return grpctest.Executions(t, direct, "killed") == 1 })
	up.Kill()
	r := <-done
	if r.Code != codes.Unknown || problemOf(r) != "outcome-unknown" || first(r.Trailer, "idempotent-replayed") != "" {
		t.Fatalf("the call: %v", r)
	}
	for range 2 {
		r := grpctest.Call(ctx, conn, grpctest.Create, c, "k-killed")
		if r.Code != codes.Unknown || problemOf(r) != "outcome-unknown" || first(r.Trailer, "idempotent-replayed") != "true" ||
			!strings.Contains(r.Message, "it was not run again") {
			t.Fatalf("a retry: %v", r)
		}
	}
}

// An instance dies (SIGKILL) while a call runs; once its claim lapses, another
// instance on the same store answers the call's retry UNKNOWN (the lapsed
// lease is held), never runs it again.
func TestE2EGRPCLapsedLeaseIsUnknown(t *testing.T) {
	skipShort(t)
	srv := &grpctest.Server{}
	addr := grpctest.Start(t, srv)
	store := redistest.Start(t).URL()
	args := []string{"--upstream", "h2c://" + addr, "--store", store, "--lock-ttl", "600ms"}
	a := start(t, args...)
	ctx := grpcCtx(t)
	c := grpctest.Charge{RequestID: "lapsed", Behavior: "slow:3s"}
	go grpctest.Call(ctx, grpctest.Dial(t, a.Addr, noRetry), grpctest.Create, c, "k-lapsed")
	testutil.Eventually(t, 10*time.Second, "the call to run", func() bool { return srv.Executions("lapsed") == 1 })
	a.Kill()
	b := grpctest.Dial(t, start(t, args...).Addr, noRetry)
	var r grpctest.Result
	testutil.Eventually(t, 10*time.Second, "the lease to lapse", func() bool {
		r = grpctest.Call(ctx, b, grpctest.Create, c, "k-lapsed")
		return problemOf(r) != "in-flight"
	})
	if r.Code != codes.Unknown || problemOf(r) != "outcome-unknown" || !strings.Contains(r.Message, "stopped before its outcome was stored") {
		t.Fatalf("the retry after the lapse: %v", r)
	}
	if n := srv.Executions("lapsed"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

// A client whose deadline passes does not cancel the call it made, as a
// client that hangs up does not: its grpc-timeout is not forwarded on a
// tracked call, the server runs it to the end, and its answer is stored for
// the retry, replayed, the call run once.
func TestE2EGRPCClientDeadlineDoesNotCancelTheCall(t *testing.T) {
	skipShort(t)
	srv := &grpctest.Server{}
	p := start(t, "--upstream", "h2c://"+grpctest.Start(t, srv))
	conn := grpctest.Dial(t, p.Addr, noRetry)
	c := grpctest.Charge{RequestID: "deadline", Behavior: "slow:600ms"}
	ctx, cancel := context.WithTimeout(grpcCtx(t), 200*time.Millisecond)
	defer cancel()
	if r := grpctest.Call(ctx, conn, grpctest.Create, c, "k-deadline"); r.Code != codes.DeadlineExceeded {
		t.Fatalf("the call past its deadline: %v", r)
	}
	var r grpctest.Result
	testutil.Eventually(t, 10*time.Second, "the call to end upstream", func() bool {
		r = grpctest.Call(grpcCtx(t), conn, grpctest.Create, c, "k-deadline")
		return problemOf(r) != "in-flight"
	})
	if r.Code != codes.OK || first(r.Header, "idempotent-replayed") != "true" || srv.Executions("deadline") != 1 {
		t.Fatalf("the retry: %v, %d executions; want the first call's answer, replayed", r, srv.Executions("deadline"))
	}
}
