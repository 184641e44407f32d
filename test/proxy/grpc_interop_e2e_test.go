package proxy_test

import (
	"testing"

	"github.com/idemproxy/idemproxy/test/grpctest"
)

// grpc-go's own interoperability suite (the cases of
// google.golang.org/grpc/interop/client, against the TestService of
// google.golang.org/grpc/interop/server) with an idempotency-key on every
// call, unary and streaming, as a client interceptor puts one: through the
// proxy at its default settings, every case passes, in about the time it
// takes directly (docs/grpc.md, What is tracked).
func TestE2EGRPCInteropWithKeys(t *testing.T) {
	skipShort(t)
	upstream := grpctest.InteropServer(t)
	p := start(t, "--upstream", "h2c://"+upstream)
	grpctest.RunInterop(t, upstream, p.Addr, "the proxy")
}
