package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// anchors returns the GitHub anchors of a Markdown text's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fence := false
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		out[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return out
}

// Every relative link in the README, the docs/ pages and the top-level
// documents names a file that exists, and an anchor into a Markdown file names
// one of its headings: the pages moved, the links must not dangle.
func TestDocsLinksResolve(t *testing.T) {
	root := Root(t)
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, top := range []string{"README.md", "SECURITY.md", "RELIABILITY.md", "BENCHMARKS.md", "CONTRIBUTING.md"} {
		pages = append(pages, filepath.Join(root, top))
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	n := 0
	for _, page := range pages {
		text := Docs(t, strings.TrimPrefix(page, root+string(filepath.Separator)))
		fence := false
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "```") {
				fence = !fence
			}
			if fence {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				n++
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist", filepath.Base(page), target)
					continue
				}
				if anchor != "" && strings.HasSuffix(path, ".md") {
					b, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					if !anchors(string(b))[anchor] {
						t.Errorf("%s links to %s: no heading with that anchor", filepath.Base(page), target)
					}
				}
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d relative links found", n)
	}
}

// Every page under docs/ is in the README's contents list: a page added there
// is found from the map.
func TestREADMEContentsListsEveryDocsPage(t *testing.T) {
	readme := Docs(t, "README.md")
	_, contents, ok := strings.Cut(readme, "\n## Contents\n")
	if !ok {
		t.Fatal("README has no Contents section")
	}
	contents, _, _ = strings.Cut(contents, "\n## ")
	pages, _ := filepath.Glob(filepath.Join(Root(t), "docs", "*.md"))
	if len(pages) < 5 {
		t.Fatalf("only %d pages under docs/", len(pages))
	}
	for _, p := range pages {
		if !strings.Contains(contents, "](docs/"+filepath.Base(p)+")") {
			t.Errorf("README's Contents does not link docs/%s", filepath.Base(p))
		}
	}
}

// The README names every target of the Makefile that `make help` lists (but
// help itself): a target added is found from the README.
func TestREADMENamesEveryMakeTarget(t *testing.T) {
	root := Root(t)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	readme := Docs(t, "README.md")
	_, list, ok := strings.Cut(readme, "`make help` lists every target:")
	list, _, ok2 := strings.Cut(list, ".")
	if !ok || !ok2 {
		t.Fatal("README lacks the list of make targets after \"`make help` lists every target:\"")
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(list, -1) {
		named[m[1]] = true
	}
	targets := regexp.MustCompile(`(?m)^([a-zA-Z_-]+):.*## `).FindAllStringSubmatch(string(makefile), -1)
	if len(targets) < 10 {
		t.Fatalf("only %d documented targets in the Makefile", len(targets))
	}
	for _, m := range targets {
		if m[1] != "help" && !named[m[1]] {
			t.Errorf("README's list of make targets lacks %s", m[1])
		}
		delete(named, m[1])
	}
	for name := range named {
		t.Errorf("README names make target %s, which the Makefile does not have", name)
	}
}

// docs/layout.md names every package directory of the module: as an entry of
// its own (a line that starts with its path), or by its last element in the
// entry of the directory above it (cache/internal/waiters in cache's entry).
func TestLayoutNamesEveryPackage(t *testing.T) {
	root := Root(t)
	layout := Docs(t, "docs/layout.md")
	_, block, _ := strings.Cut(layout, "```\n")
	block, _, _ = strings.Cut(block, "```")
	// entries: the path at the start of a line ("a, b" for two), and the text
	// up to the next such line.
	entries := map[string]string{}
	var cur []string
	for _, line := range strings.Split(block, "\n") {
		if line != "" && line[0] != ' ' {
			cur = cur[:0]
			for _, w := range strings.Fields(line) {
				cur = append(cur, strings.TrimSuffix(strings.TrimSuffix(w, ","), "/"))
				if !strings.HasSuffix(w, ",") {
					break
				}
			}
		}
		for _, p := range cur {
			entries[p] += " " + strings.TrimSpace(line)
		}
	}
	n, seen := 0, map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		if dir == "." || seen[dir] {
			return nil
		}
		seen[dir] = true
		n++
		if _, ok := entries[dir]; ok {
			return nil
		}
		parent := filepath.Dir(dir)
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(filepath.Base(dir)) + `\b`).MatchString(entries[parent]) {
			t.Errorf("docs/layout.md does not name %s (an entry of its own, or %q in the entry of %s)", dir, filepath.Base(dir), parent)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 30 {
		t.Fatalf("only %d package directories found", n)
	}
}
