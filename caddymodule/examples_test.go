package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// caddyfileExample is a Caddyfile shown to users: a file under examples/, or a
// caddyfile block of the README or a docs/ page, with the JSON file its section
// says it adapts to, if any.
type caddyfileExample struct {
	name, text, json string
}

// caddyfileExamples finds every Caddyfile shown to users.
func caddyfileExamples(t *testing.T) []caddyfileExample {
	t.Helper()
	root := testutil.Root(t)
	var out []caddyfileExample
	files, _ := filepath.Glob(filepath.Join(root, "examples", "*", "Caddyfile"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, caddyfileExample{name: strings.TrimPrefix(f, root+"/"), text: string(b)})
	}
	claim := regexp.MustCompile(`JSON equivalent of\s+the Caddyfile above is in \[[^\]]*\]\(([^)]+\.json)\)`)
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rest := string(b)
		for n := 1; ; n++ {
			_, block, ok := strings.Cut(rest, "```caddyfile\n")
			if !ok {
				break
			}
			block, rest, _ = strings.Cut(block, "```")
			ex := caddyfileExample{name: fmt.Sprintf("%s block %d", filepath.Base(page), n), text: block}
			section, _, _ := strings.Cut(rest, "\n#")
			if m := claim.FindStringSubmatch(section); m != nil {
				ex.json = filepath.Join(filepath.Dir(page), m[1])
			}
			out = append(out, ex)
		}
	}
	if len(files) < 2 || len(out) < len(files)+2 {
		t.Fatalf("found %d example Caddyfiles and %d in all", len(files), len(out))
	}
	return out
}

// Every Caddyfile shown to users is as `caddy fmt` writes it, adapts without an
// error or a warning, and adapts to the JSON its page says it does.
func TestCaddyfileExamplesAreFormattedAndAdapt(t *testing.T) {
	claims := 0
	for _, ex := range caddyfileExamples(t) {
		if got := caddyfile.Format([]byte(ex.text)); !bytes.Equal(got, []byte(ex.text)) {
			t.Errorf("%s is not as caddy fmt writes it; caddy fmt gives:\n%s", ex.name, got)
		}
		out, warnings, err := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}.Adapt([]byte(ex.text), map[string]any{"filename": ex.name})
		if err != nil {
			t.Errorf("%s does not adapt: %v", ex.name, err)
			continue
		}
		for _, w := range warnings {
			t.Errorf("%s: adapt warning: %s", ex.name, w)
		}
		if ex.json == "" {
			continue
		}
		claims++
		want, err := os.ReadFile(ex.json)
		if err != nil {
			t.Fatal(err)
		}
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, out, "", "\t")
		if !jsonEqual(t, pretty.Bytes(), want) {
			t.Errorf("%s says it adapts to %s, but adapts to:\n%s", ex.name, ex.json, pretty.Bytes())
		}
	}
	if claims == 0 {
		t.Error("no Caddyfile block claims its JSON: docs/caddy.md's does")
	}
}
