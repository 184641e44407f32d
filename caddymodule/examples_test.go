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

// examples/caddy/Caddyfile inside real Caddy: X-Idempotency-Result names the
// outcome where the directive runs, and no response carries a literal
// placeholder (before, every request outside /charges*, and a GET inside it,
// got "X-Idempotency-Result: {http.idempotency.result}").
func TestCaddyExampleResultHeader(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewUpstream(t)
	src, err := os.ReadFile("../examples/caddy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := strings.NewReplacer(":8443", ":0", "127.0.0.1:2019", adminAddress(dir),
		"127.0.0.1:3000", strings.TrimPrefix(up.URL, "http://")).Replace(string(src))
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := runCaddy(t, caddyBinary(t), dir, path)
	for _, c := range []struct {
		q    testutil.Request
		want string // the header's value; "" for none
	}{
		{testutil.Request{Method: "GET", Target: "/charges"}, "untracked"},
		{testutil.Request{Method: "GET", Target: "/"}, ""},
		{testutil.Request{Target: "/refunds", Key: "r1", Body: "{}"}, ""},
		{testutil.Request{Target: "/charges", Key: "c1", Body: "{}"}, "stored"},
		{testutil.Request{Target: "/charges", Key: "c1", Body: "{}"}, "replayed"},
	} {
		r := p.Send(t, c.q)
		for name, values := range r.Header {
			for _, v := range values {
				if strings.Contains(v, "{") {
					t.Errorf("%s %s: %s: %q, a placeholder left unreplaced", c.q.Method, c.q.Target, name, v)
				}
			}
		}
		if got := r.Header.Get("X-Idempotency-Result"); got != c.want {
			t.Errorf("%s %s (key %q): X-Idempotency-Result %q, want %q", c.q.Method, c.q.Target, c.q.Key, got, c.want)
		}
	}
}
