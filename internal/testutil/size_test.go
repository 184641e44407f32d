package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxFileLines is the most lines a non-test Go file may have (issue 35): past
// it a file holds more than one responsibility, and is split by them.
const maxFileLines = 400

// No non-test Go file the repository tracks, in any of its modules, is longer
// than maxFileLines.
func TestNoLongSourceFile(t *testing.T) {
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
		if lines := bytes.Count(b, []byte("\n")); lines > maxFileLines {
			t.Errorf("%s has %d lines, more than %d: split it by responsibility", f, lines, maxFileLines)
		}
	}
	if n < 100 {
		t.Fatalf("read only %d Go files under %s", n, root)
	}
}
