package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Root returns the repository's root directory: the nearest directory above
// the test's working directory that holds the root module's go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		// The repository's root module, not the nearest go.mod: the proxy,
		// Caddy and the heavy stores are modules of their own below it.
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && rootModule.Match(b) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of module github.com/idemproxy/idemproxy above the working directory")
		}
		dir = parent
	}
}

// rootModule matches the go.mod of the repository's root module.
var rootModule = regexp.MustCompile(`(?m)^module github\.com/idemproxy/idemproxy\s*$`)

// SettingsDoc is the page of the one settings table, generated from the
// settings' tags (test/settingsdoc).
const SettingsDoc = "docs/settings.md"

// Docs returns the text of the documents named, by their paths from the module
// root ("README.md", SettingsDoc), joined; with no names, README.md and every
// page under docs/. A document that is missing fails the test.
func Docs(t testing.TB, names ...string) string {
	t.Helper()
	root := Root(t)
	if len(names) == 0 {
		pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
		if err != nil || len(pages) == 0 {
			t.Fatalf("no pages under docs/ (%v)", err)
		}
		names = append(names, "README.md")
		for _, p := range pages {
			names = append(names, filepath.Join("docs", filepath.Base(p)))
		}
	}
	var b strings.Builder
	for _, name := range names {
		text, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(text)
		b.WriteString("\n")
	}
	return b.String()
}
