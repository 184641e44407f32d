package caddy_test

import (
	"testing"

	"github.com/idemproxy/idemproxy/test/grpctest"
)

// grpc-go's own interoperability suite with an idempotency-key on every call
// through Caddy at the module's default settings, as TestE2EGRPCInteropWithKeys
// does through the proxy.
func TestCaddyGRPCInteropWithKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped under -short")
	}
	upstream := grpctest.InteropServer(t)
	p := grpcCaddy(t, upstream, "")
	grpctest.RunInterop(t, upstream, p.Addr, "Caddy")
}
