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

const systemdUnit = "../../examples/systemd/idemproxy.service"

// The sample unit is one systemd accepts (systemd-analyze verify, with the
// built binary where the unit expects it), with its LoadCredential= recipe
// turned on too; its sandbox rates "OK" or better (systemd-analyze
// security); and its ExecStart line starts the built binary with the
// configuration the unit's comment installs, as it is, with no secret set
// (`idemproxy validate` accepts it too), which SIGTERM stops cleanly.
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
			args[i] = "../../examples/systemd/idemproxy.yaml" // what the unit's comment installs there
		}
	}
	if !strings.Contains(string(unit), "install -m 0644 examples/systemd/idemproxy.yaml /etc/idemproxy/idemproxy.yaml") {
		t.Fatal("the unit's comment no longer installs examples/systemd/idemproxy.yaml")
	}
	// Ports of its own: the sample's are fixed ones another test may hold.
	zero := []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}
	if code, out := testutil.Run(t, bin, append([]string{"validate"}, args...)); code != 0 {
		t.Fatalf("idemproxy validate of the unit's configuration: exit %d\n%s", code, out)
	}
	p := testutil.Start(t, bin, append(args, zero...))
	l := p.WaitListening(t)
	if l.Metrics == "" || l.Admin == "" {
		t.Fatalf("the unit's configuration starts without its admin or metrics listener: %+v", l)
	}
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
	withCreds := strings.ReplaceAll(strings.ReplaceAll(string(unit), "/usr/local/bin/idemproxy", bin), "\n#LoadCredential=", "\nLoadCredential=")
	if strings.Count(withCreds, "\nLoadCredential=") < 2 {
		t.Fatal("the unit has no LoadCredential= recipe")
	}
	credDir := filepath.Join(dir, "creds")
	if err := os.Mkdir(credDir, 0o755); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(credDir, "idemproxy.service")
	if err := os.WriteFile(creds, []byte(withCreds), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemd-analyze", "verify", creds).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify, LoadCredential= lines on: %v\n%s", err, out)
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
