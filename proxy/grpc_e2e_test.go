package proxy_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/grpctest"
)

// grpcUpstream serves the test service in process on a loopback port.
func grpcUpstream(t *testing.T) (*grpctest.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &grpctest.Server{}
	srv := s.Serve(ln)
	t.Cleanup(srv.Stop)
	return s, ln.Addr().String()
}

func TestE2EGRPCProbe(t *testing.T) {
	skipShort(t)
	srv, addr := grpcUpstream(t)
	p := start(t, "--upstream", "h2c://"+addr)
	conn := grpctest.Dial(t, p.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := grpctest.Charge{RequestID: "r1", Amount: 42}
	a := grpctest.Call(ctx, conn, grpctest.Create, c, "k-1")
	b := grpctest.Call(ctx, conn, grpctest.Create, c, "k-1")
	t.Logf("a: %v", a)
	t.Logf("b: %v", b)
	t.Logf("executions %d", srv.Executions("r1"))
	c.Behavior = "fail:5"
	a = grpctest.Call(ctx, conn, grpctest.Create, c, "k-2")
	b = grpctest.Call(ctx, conn, grpctest.Create, c, "k-2")
	t.Logf("a: %v", a)
	t.Logf("b: %v", b)
	c.Amount = 1
	b = grpctest.Call(ctx, conn, grpctest.Create, c, "k-2")
	t.Logf("mismatch: %v", b)
	t.Logf("executions %d", srv.Executions("r1"))
}
