package grpctest

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// interopCases are the interop client's test cases that need no credentials,
// no load balancer and no soak.
var interopCases = []struct {
	name string
	run  func(ctx context.Context, conn *grpc.ClientConn)
}{
	{"empty_unary", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoEmptyUnaryCall(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"large_unary", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoLargeUnaryCall(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"client_streaming", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoClientStreaming(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"server_streaming", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoServerStreaming(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"ping_pong", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoPingPong(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"empty_stream", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoEmptyStream(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"timeout_on_sleeping_server", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoTimeoutOnSleepingServer(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"cancel_after_begin", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoCancelAfterBegin(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"cancel_after_first_response", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoCancelAfterFirstResponse(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"status_code_and_message", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoStatusCodeAndMessage(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"special_status_message", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoSpecialStatusMessage(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"custom_metadata", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoCustomMetadata(ctx, testgrpc.NewTestServiceClient(c))
	}},
	{"unimplemented_method", func(ctx context.Context, c *grpc.ClientConn) { interop.DoUnimplementedMethod(ctx, c) }},
	{"unimplemented_service", func(ctx context.Context, c *grpc.ClientConn) {
		interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(c))
	}},
}

// interopFailures turns the interop cases' logger.Fatalf (which would exit
// the test binary) into a failure of the case that called it: the case's
// goroutine ends there (runInteropCase).
type interopFailures struct {
	grpclog.LoggerV2
	mu   sync.Mutex
	last string
}

func (l *interopFailures) fail(msg string) {
	l.mu.Lock()
	l.last = msg
	l.mu.Unlock()
	runtime.Goexit()
}

func (l *interopFailures) Fatal(args ...any)                 { l.fail(fmt.Sprint(args...)) }
func (l *interopFailures) Fatalln(args ...any)               { l.fail(fmt.Sprintln(args...)) }
func (l *interopFailures) Fatalf(format string, args ...any) { l.fail(fmt.Sprintf(format, args...)) }

var interopLog = &interopFailures{LoggerV2: grpclog.NewLoggerV2(discard{}, discard{}, discard{})}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// The interop cases' logger is set once, before any gRPC goroutine of the
// test binary starts (grpclog.SetLoggerV2 must come before them: a later call
// races with a server's or client's log reads).
func init() { grpclog.SetLoggerV2(interopLog) }

// runInteropCase runs one case and says how long it took and why it failed
// ("" when it passed).
func runInteropCase(run func(context.Context, *grpc.ClientConn), conn *grpc.ClientConn) (time.Duration, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	interopLog.mu.Lock()
	interopLog.last = ""
	interopLog.mu.Unlock()
	t0 := time.Now()
	passed := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx, conn)
		passed = true
	}()
	<-done
	took := time.Since(t0)
	if passed {
		return took, ""
	}
	interopLog.mu.Lock()
	defer interopLog.mu.Unlock()
	return took, interopLog.last
}

// keyEveryCall is a client that sends an idempotency-key with every call, a
// new one each, unary or streaming.
func keyEveryCall(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	var n atomic.Int64
	key := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "idempotency-key", fmt.Sprintf("interop-%d-%d", time.Now().UnixNano(), n.Add(1)))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(key(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(key(ctx), desc, cc, method, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// InteropServer serves grpc-go's interop TestService over h2c.
func InteropServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// RunInterop runs grpc-go's interop cases with an idempotency-key on every
// call (as a client interceptor puts one), directly against upstream (an
// InteropServer) and through the server at through (named via in messages),
// one after the other: every case must pass through it, in about the time it
// takes directly.
func RunInterop(t *testing.T, upstream, through, via string) {
	t.Helper()
	direct, proxied := keyEveryCall(t, upstream), keyEveryCall(t, through)
	// Connect both first, so that no case's time has a dial in it.
	interop.DoEmptyUnaryCall(context.Background(), testgrpc.NewTestServiceClient(direct))
	interop.DoEmptyUnaryCall(context.Background(), testgrpc.NewTestServiceClient(proxied))
	for _, c := range interopCases {
		d, derr := runInteropCase(c.run, direct)
		if derr != "" {
			t.Fatalf("%s directly: %s", c.name, derr)
		}
		pt, perr := runInteropCase(c.run, proxied)
		t.Logf("%-28s direct %8v  through %s %8v", c.name, d.Round(10*time.Microsecond), via, pt.Round(10*time.Microsecond))
		if perr != "" {
			t.Errorf("%s through %s: %s", c.name, via, perr)
			continue
		}
		// timeout_on_sleeping_server waits for its 1 ms deadline and every
		// case's own work, so "about the same time" allows a fixed margin.
		if pt > 2*d+100*time.Millisecond {
			t.Errorf("%s: %v through %s, %v directly", c.name, pt, via, d)
		}
	}
}
