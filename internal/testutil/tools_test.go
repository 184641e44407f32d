package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// make fuzz runs every fuzz target the test files declare, in the package
// that declares it (it finds them: .ci/fuzz, .ci/testfuncs), and a target
// asked for by a name no package has fails instead of fuzzing nothing.
func TestFuzzFindsEveryTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the test binaries of the packages with fuzz targets")
	}
	root := Root(t)
	cmd := exec.Command("./.ci/fuzz", "-l")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf(".ci/fuzz -l: %v", err)
	}
	found := strings.Split(strings.TrimSpace(string(out)), "\n")

	declared := declaredFuncs(t, root, `^func (Fuzz\w+)\(\w+ \*testing\.F\)`)
	slices.Sort(found)
	slices.Sort(declared)
	if len(declared) < 8 || !slices.Equal(found, declared) {
		t.Fatalf(".ci/fuzz finds\n%q\nthe test files declare\n%q", found, declared)
	}

	cmd = exec.Command("./.ci/fuzz")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "FUZZ=FuzzNoSuchTarget", "FUZZTIME=1s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "no fuzz target FuzzNoSuchTarget") {
		t.Fatalf("FUZZ=FuzzNoSuchTarget: %v, %q; want a failure naming it", err, stderr.String())
	}
}

// declaredFuncs returns "./dir Name" for every match of re (its first group,
// the name) in the module's test files.
func declaredFuncs(t *testing.T, root, re string) []string {
	t.Helper()
	fn := regexp.MustCompile(`(?m)` + re)
	var out []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range fn.FindAllSubmatch(b, -1) {
			out = append(out, "./"+dir+" "+string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
