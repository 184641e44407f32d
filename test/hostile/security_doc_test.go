package hostile_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// SECURITY.md names, for each promise, the tests that hold it: every name must
// be a test or fuzz target that exists, so the threat model cannot point at a
// test that was renamed or deleted.
func TestSecurityDocNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../../SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	fn := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)\w+)\(`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fn.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)\\w+)(?:/[^`]*)?`").FindAllSubmatch(doc, -1)
	if len(named) < 20 {
		t.Fatalf("SECURITY.md names %d tests; the threat model lost its table?", len(named))
	}
	for _, m := range named {
		if !defined[string(m[1])] {
			t.Errorf("SECURITY.md names %s, which no test file defines", m[1])
		}
	}
}
