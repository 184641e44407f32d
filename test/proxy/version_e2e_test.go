package proxy_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// The built binary says which version it is, with a flag as with the
// subcommand, and that version is the one Go stamped into it.
func TestE2EVersion(t *testing.T) {
	skipShort(t)
	bin := testutil.Build(t, "../../cmd/idemproxy")
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var modVersion string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "mod" {
			modVersion = f[2]
		}
	}
	if modVersion == "" {
		t.Fatalf("no module line in go version -m:\n%s", out)
	}
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		code, got := testutil.Run(t, bin, args)
		if code != 0 {
			t.Fatalf("idemproxy %s: exit %d\n%s", args[0], code, got)
		}
		f := strings.Fields(got)
		if len(f) != 2 || f[0] != "idemproxy" {
			t.Fatalf("idemproxy %s printed %q, want \"idemproxy VERSION\"", args[0], got)
		}
		if modVersion != "(devel)" && f[1] != modVersion {
			t.Errorf("idemproxy %s says %q; the binary's build info says %q", args[0], f[1], modVersion)
		}
		if f[1] == "dev" {
			t.Errorf("idemproxy %s says %q: not taken from the build info", args[0], f[1])
		}
	}
}
