package proxy_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// quickStartLines returns the README's quick-start tour: the first sh block
// after "## Quick start" that sends a request.
func quickStartLines(t *testing.T) string {
	t.Helper()
	readme := testutil.Docs(t, "README.md")
	_, rest, ok := strings.Cut(readme, "## Quick start")
	if !ok {
		t.Fatal("README has no Quick start section")
	}
	for {
		_, block, ok := strings.Cut(rest, "```sh\n")
		if !ok {
			t.Fatal("README's Quick start has no sh block with curl lines")
		}
		block, rest, _ = strings.Cut(block, "```")
		if strings.Contains(block, "curl") {
			return block
		}
	}
}

// The README's quick-start lines, run as written (on free ports) against the
// demo API and the built proxy with the demo's configuration, show what their
// comments promise, every time: a replay, a 422, a 409 for the duplicate sent
// while the first runs, two charges, a webhook run once and a forged one
// refused. Run several times: the 409 line must not depend on which of two
// racing requests arrives first.
func TestREADMEQuickStartRunsAsWritten(t *testing.T) {
	skipShort(t)
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is not installed")
		}
		t.Skip("curl is not installed")
	}
	lines := quickStartLines(t)
	demoapi := testutil.Build(t, "../../examples/demoapi")
	for run := range 3 {
		api := testutil.FreeAddr(t)
		apiProc := testutil.Start(t, demoapi, []string{"--listen", api})
		apiProc.WaitHTTP(t, "http://"+api+"/charges")
		secret := "whsec_ZGVtby13ZWJob29rLXNlY3JldA=="
		p := testutil.StartIdemproxy(t, binary(t), []string{"--config", "../../examples/demo.yaml", "--upstream", "http://" + api},
			"DEMO_WEBHOOK_SECRET="+secret)
		script := strings.NewReplacer(
			"127.0.0.1:8080", p.Addr, "127.0.0.1:3000", api, "127.0.0.1:9090", p.Admin,
			"bin/idemproxy", binary(t),
		).Replace(lines)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		cancel()
		text := string(out)
		if err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, text)
		}
		for _, want := range []string{
			"Idempotent-Replayed: true", "HTTP/1.1 422", "HTTP/1.1 409", "Retry-After:",
			`"count":2`, "HTTP/1.1 401", `"deliveries":1`, `"state"`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("run %d: the README's lines did not show %q:\n%s", run, want, text)
			}
		}
		if t.Failed() {
			return
		}
		p.Kill()
		apiProc.Kill()
	}
}
