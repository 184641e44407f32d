package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// codeMarker names the file a Markdown code block is taken from: the block
// that follows it must be in that file, line for line (under one indent), so
// that the recipe a reader copies is the code go test runs.
var codeMarker = regexp.MustCompile(`^<!-- code: (\S+) -->$`)

// Every code block marked <!-- code: FILE --> in the README and docs/ is in
// FILE; every file of the framework recipes (examples/frameworks, a module of
// its own that make test runs) is shown in docs/go.md.
func TestDocsCodeIsTheExamples(t *testing.T) {
	root := Root(t)
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	pages = append(pages, filepath.Join(root, "README.md"))
	shown := map[string]bool{}
	for _, page := range pages {
		name, _ := filepath.Rel(root, page)
		lines := strings.Split(Docs(t, name), "\n")
		for i := 0; i < len(lines); i++ {
			m := codeMarker.FindStringSubmatch(lines[i])
			if m == nil {
				continue
			}
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
				t.Errorf("%s:%d: %s is not followed by a code block", name, i+1, m[0])
				continue
			}
			var block []string
			j := i + 2
			for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
				block = append(block, lines[j])
			}
			i = j
			src, err := os.ReadFile(filepath.Join(root, m[1]))
			if err != nil {
				t.Errorf("%s:%d: %v", name, i+1, err)
				continue
			}
			shown[m[1]] = true
			if !containsBlock(strings.Split(string(src), "\n"), block) {
				t.Errorf("%s: the block marked %s is not in that file (line for line, under one indent):\n%s", name, m[1], strings.Join(block, "\n"))
			}
		}
	}
	recipes, _ := filepath.Glob(filepath.Join(root, "examples", "frameworks", "*.go"))
	if len(recipes) < 6 {
		t.Fatalf("only %d files in examples/frameworks", len(recipes))
	}
	for _, f := range recipes {
		rel, _ := filepath.Rel(root, f)
		base := filepath.Base(f)
		if base == "doc.go" || base == "helpers_test.go" || strings.HasSuffix(base, "_test.go") && !strings.HasSuffix(base, "_example_test.go") {
			continue
		}
		if !shown[filepath.ToSlash(rel)] {
			t.Errorf("docs/go.md shows no block of %s (mark one with <!-- code: %s -->)", rel, filepath.ToSlash(rel))
		}
	}
}

// containsBlock reports whether block is lines[i:i+len(block)] for some i,
// each line of it under the same indent (an empty line may stand for a line
// of that indent alone).
func containsBlock(lines, block []string) bool {
	if len(block) == 0 {
		return false
	}
	for i, l := range lines {
		indent, ok := strings.CutSuffix(l, block[0])
		if !ok || strings.TrimLeft(indent, "\t ") != "" || i+len(block) > len(lines) {
			continue
		}
		match := true
		for k, b := range block {
			got := lines[i+k]
			if got != indent+b && !(b == "" && strings.TrimSpace(got) == "") {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
