package proxy_test

import (
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// The end-to-end tests run the built binary over real sockets, with the shared
// harness of internal/testutil.

func TestMain(m *testing.M) { testutil.Main(m) }

// binary is idemproxy built with the race detector, once for the package.
func binary(t *testing.T) string {
	t.Helper()
	return testutil.Build(t, "../../cmd/idemproxy", "-race")
}

// start runs the binary with --listen and --admin on free ports and args, and
// waits until /healthz answers.
func start(t *testing.T, args ...string) *testutil.Proc {
	t.Helper()
	return testutil.StartIdemproxy(t, binary(t), args)
}

// runBin runs the binary to completion and returns its exit code and its
// combined output.
func runBin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return testutil.Run(t, binary(t), args)
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped under -short")
	}
}

// metricsOf reads the admin listener's /metrics.
func metricsOf(t *testing.T, admin string) string {
	t.Helper()
	return testutil.Send(t, admin, testutil.Request{Method: "GET", Target: "/metrics"}).Body
}

// startConfig runs the binary on a config file with the text config, and args.
func startConfig(t *testing.T, config string, args ...string) *testutil.Proc {
	t.Helper()
	return start(t, append([]string{"--config", testutil.TempFile(t, "idemproxy.yaml", config)}, args...)...)
}
