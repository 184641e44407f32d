package caddy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/idemproxy/idemproxy/internal/faultproxy"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/test/grpctest"
)

// grpcCaddy runs real Caddy (examples/caddy) serving HTTP/1.1, HTTP/2 and h2c
// on its site, the idempotency handler (its Caddyfile block holding
// settings) in front of reverse_proxy h2c://upstream, and returns it.
func grpcCaddy(t *testing.T, upstream, settings string) *testutil.Proc {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	servers {
		protocols h1 h2 h2c
	}
}
:0 {
	idempotency {
		store memory
		%s
	}
	reverse_proxy h2c://%s
}
`, settings, upstream)
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return runCaddy(t, caddyBinary(t), dir, path)
}

func grpcMeta(md metadata.MD, name string) string {
	if v := md.Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// A grpc-go client, its retry policy on, through real Caddy with the module to
// a grpc-go server: an answer lost on its way back is retried and replayed,
// the server running the call once; a replay carries the first answer's
// metadata and trailers byte for byte; the core's answers are the documented
// codes; a key in the message (proto:3.1) works as in the proxy.
func TestCaddyGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	var fp *faultproxy.Proxy
	var once sync.Once
	srv := &grpctest.Server{Started: func(c grpctest.Charge) {
		if c.RequestID == "lost" {
			once.Do(func() { fp.ResetAll(); time.Sleep(150 * time.Millisecond) })
		}
	}}
	addr := grpctest.Start(t, srv)
	p := grpcCaddy(t, addr, "retry_after 100ms\n\t\thandler_timeout 1s")
	var err error
	if fp, err = faultproxy.New(p.Addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	conn := grpctest.Dial(t, fp.Addr(), grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}}))
	r := grpctest.Call(ctx, conn, grpctest.Create, grpctest.Charge{RequestID: "lost", Amount: 7}, "k-lost")
	if r.Err != nil || grpcMeta(r.Header, "idempotent-replayed") != "true" || r.Receipt.ID != "ch_lost_1" || srv.Executions("lost") != 1 {
		t.Fatalf("a lost answer, retried: %v (executions %d)", r, srv.Executions("lost"))
	}

	direct := grpctest.Dial(t, p.Addr, grpc.WithDisableRetry())
	call := func(c grpctest.Charge, key string) grpctest.Result {
		return grpctest.Call(ctx, direct, grpctest.Create, c, key)
	}
	strip := func(md metadata.MD) string {
		c := md.Copy()
		delete(c, "date")   // each answer's own
		delete(c, "server") // Caddy's, on an answer it writes (reverse_proxy's carry Via instead)
		delete(c, "idempotent-replayed")
		return fmt.Sprint(c)
	}
	for _, c := range []grpctest.Charge{{RequestID: "ok", Amount: 1}, {RequestID: "nf", Behavior: "fail:5"}, {RequestID: "rej", Behavior: "reject:9"}} {
		a, b := call(c, "k-"+c.RequestID), call(c, "k-"+c.RequestID)
		if a.Code != b.Code || a.Message != b.Message || a.Receipt != b.Receipt || srv.Executions(c.RequestID) != 1 ||
			strip(a.Header) != strip(b.Header) || strip(a.Trailer) != strip(b.Trailer) ||
			grpcMeta(b.Header, "idempotent-replayed")+grpcMeta(b.Trailer, "idempotent-replayed") != "true" {
			t.Fatalf("%s replayed:\n%v\n%v", c.RequestID, a, b)
		}
	}

	code := func(what string, r grpctest.Result, want codes.Code, problem string) {
		t.Helper()
		if r.Code != want || grpcMeta(r.Trailer, "idempotency-problem") != "urn:idemproxy:problem:"+problem {
			t.Fatalf("%s: %v; want %v and %s", what, r, want, problem)
		}
	}
	code("key reused", call(grpctest.Charge{RequestID: "ok", Amount: 2}, "k-ok"), codes.FailedPrecondition, "mismatch")
	done := make(chan grpctest.Result, 1)
	go func() { done <- call(grpctest.Charge{RequestID: "slow", Behavior: "slow:500ms"}, "k-slow") }()
	testutil.Eventually(t, 10*time.Second, "the slow call to run", func() bool { return srv.Executions("slow") == 1 })
	r = call(grpctest.Charge{RequestID: "slow", Behavior: "slow:500ms"}, "k-slow")
	code("in flight", r, codes.Unavailable, "in-flight")
	if grpcMeta(r.Trailer, "grpc-retry-pushback-ms") != "100" {
		t.Fatalf("in flight: %v", r)
	}
	<-done
	for i := range 2 {
		r := call(grpctest.Charge{RequestID: "timeout", Behavior: "slow:3s"}, "k-timeout")
		code("handler timeout", r, codes.Unknown, "outcome-unknown")
		if (grpcMeta(r.Trailer, "idempotent-replayed") == "true") != (i > 0) {
			t.Fatalf("handler timeout, answer %d: %v", i, r)
		}
	}

	q := grpcCaddy(t, addr, "key_source proto:3.1\n\t\trequire_key")
	qc := grpctest.Dial(t, q.Addr, grpc.WithDisableRetry())
	c := grpctest.Charge{RequestID: "aep", Key: "aep-key-1"}
	a, b := grpctest.Call(ctx, qc, grpctest.Create, c, ""), grpctest.Call(ctx, qc, grpctest.Create, c, "")
	if a.Code != codes.OK || grpcMeta(b.Header, "idempotent-replayed") != "true" || srv.Executions("aep") != 1 {
		t.Fatalf("proto:3.1 through Caddy: %v\n%v", a, b)
	}
	code("no key in the message", grpctest.Call(ctx, qc, grpctest.Create, grpctest.Charge{RequestID: "none"}, ""), codes.InvalidArgument, "missing-key")
}

// The gRPC server dies (SIGKILL) while it runs a call through Caddy: the call
// and every retry are answered UNKNOWN, the key held.
func TestCaddyGRPCServerKilledMidCall(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up, addr := grpctest.StartProcess(t, testutil.Build(t, "../grpctest/grpcupstream"))
	p := grpcCaddy(t, addr, "")
	conn := grpctest.Dial(t, p.Addr, grpc.WithDisableRetry())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := grpctest.Charge{RequestID: "killed", Behavior: "hang"}
	done := make(chan grpctest.Result, 1)
	go func() { done <- grpctest.Call(ctx, conn, grpctest.Create, c, "k-killed") }()
	direct := grpctest.Dial(t, addr, grpc.WithDisableRetry())
	testutil.Eventually(t, 10*time.Second, "the call to run", func() bool { return grpctest.Executions(t, direct, "killed") == 1 })
	up.Kill()
	for i, r := range []grpctest.Result{<-done, grpctest.Call(ctx, conn, grpctest.Create, c, "k-killed"), grpctest.Call(ctx, conn, grpctest.Create, c, "k-killed")} {
		if r.Code != codes.Unknown || !strings.HasSuffix(grpcMeta(r.Trailer, "idempotency-problem"), "outcome-unknown") ||
			(grpcMeta(r.Trailer, "idempotent-replayed") == "true") != (i > 0) {
			t.Fatalf("answer %d: %v", i, r)
		}
	}
}
