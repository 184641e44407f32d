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
	for _, top := range []string{"README.md", "SECURITY.md", "RELIABILITY.md", "BENCHMARKS.md"} {
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
