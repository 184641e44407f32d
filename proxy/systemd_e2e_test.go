package proxy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

const systemdUnit = "../examples/systemd/idemproxy.service"

// The sample unit is one systemd accepts (systemd-analyze verify, with the
// built binary where the unit expects it), its sandbox rates "OK" or better
// (systemd-analyze security), and its ExecStart line starts the built binary
// with the sample configuration, which SIGTERM stops cleanly.
func TestE2ESystemdUnit(t *testing.T) {
	skipShort(t)
	unit, err := os.ReadFile(systemdUnit)
	if err != nil {
		t.Fatal(err)
	}
	var execStart []string
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = strings.Fields(v)
		}
	}
	if len(execStart) < 2 || execStart[0] != "/usr/local/bin/idemproxy" || !strings.Contains(string(unit), "\nExecReload=/bin/kill -HUP $MAINPID\n") {
		t.Fatalf("ExecStart %q; the unit must start /usr/local/bin/idemproxy and reload with SIGHUP", execStart)
	}
	bin := binary(t)
	args := execStart[1:]
	for i, a := range args {
		if a == "/etc/idemproxy/idemproxy.yaml" {
			args[i] = "../examples/idemproxy.yaml" // what the unit's comment installs there
		}
	}
	p := testutil.StartIdemproxy(t, bin, args, "GITHUB_WEBHOOK_SECRET=s1", "STANDARD_WEBHOOK_SECRET=whsec_c2VjcmV0")
	p.Stop(t)

	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is missing (apt-get install systemd): the unit was not verified")
	}
	dir := t.TempDir()
	local := filepath.Join(dir, "idemproxy.service")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/idemproxy", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", local).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", local).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for idemproxy.service: ([0-9.]+) (\S+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2 {
		t.Fatalf("exposure %s %s, want 2 or less:\n%s", m[1], m[2], out)
	}
}
