// Package hostile_test is idemproxy's adversarial suite: it drives the built
// proxy's entrance, over real sockets, with what a client controls (the case,
// encoding and parameters of the request line, the Host's spelling, cookies,
// sizes and pace) and holds the promises: an operation never runs twice, a
// protection is never skipped, one client never reads another's answer, and the
// proxy is not exhausted. Variants come from a seeded generator (the seed is
// logged; HOSTILE_SEED replays one), so a failure is reproducible.
package hostile_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("adversarial suite: runs the built proxy; skipped under -short")
	}
}

// rng returns the test's generator, seeded from HOSTILE_SEED or the clock, and
// logs the seed.
func rng(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOSTILE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("HOSTILE_SEED=%d", seed)
	return rand.New(rand.NewPCG(seed, 0x1d3))
}

// newUpstream counts what reaches it: by the X-Op header the suite puts on every
// request (one logical operation, Count), by "METHOD path" and in total.
func newUpstream(t *testing.T) *testutil.Upstream {
	return testutil.NewUpstream(t, testutil.CountBy(testutil.ByHeader("X-Op")))
}

// start runs the proxy with the config file text (upstream and ports are
// flags) and the environment, and waits until it serves. Its log level stays
// info: the start-up line (an info line) says which ports it bound.
func start(t *testing.T, up *testutil.Upstream, config string, env ...string) *testutil.Proc {
	t.Helper()
	args := []string{"--config", testutil.TempFile(t, "idemproxy.yaml", config)}
	if up != nil {
		args = append(args, "--upstream", up.URL)
	}
	return testutil.StartIdemproxy(t, testutil.Build(t, "../../cmd/idemproxy"), args, env...)
}

// req is one request with everything a client controls; the target is sent
// byte for byte.
type req = testutil.Request

// raw writes text on a fresh connection and returns everything read back until
// the server closes it or the deadline passes.
func raw(t *testing.T, p *testutil.Proc, text string, deadline time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(deadline))
	if _, err := io.WriteString(c, text); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	io.Copy(&out, c)
	return out.String()
}

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
