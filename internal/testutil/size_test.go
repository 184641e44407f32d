package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// warnFileLines is the length past which a non-test Go file is worth a second
// look. The rule is that a file holds one idea (CONTRIBUTING.md, "Files"), cut
// where the idea changes, not where it grows long: length is only a hint, so
// this is a warning, never a failure.
const warnFileLines = 800

// Each non-test Go file the repository tracks, in any of its modules, that is
// longer than warnFileLines is logged (go test -v shows it), as a question:
// is it still one idea?
func TestLongSourceFileWarning(t *testing.T) {
	root := Root(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the working tree
		}
		n++
		if lines := bytes.Count(b, []byte("\n")); lines > warnFileLines {
			t.Logf("warning: %s has %d lines, more than %d: is it still one idea? (CONTRIBUTING.md, Files)", f, lines, warnFileLines)
		}
	}
	if n < 100 {
		t.Fatalf("read only %d Go files under %s", n, root)
	}
}
