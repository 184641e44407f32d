package caddymodule

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// Caddyfile → JSON fixtures: testdata/NAME.caddyfile adapts to testdata/NAME.json.
// Run with UPDATE_FIXTURES=1 to rewrite the JSON after reviewing a change.
func TestAdaptFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.caddyfile")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want, err := os.ReadFile(strings.TrimSuffix(f, ".caddyfile") + ".json")
			if err != nil && os.Getenv("UPDATE_FIXTURES") == "" {
				t.Fatal(err)
			}
			got := adapt(t, f)
			if os.Getenv("UPDATE_FIXTURES") != "" {
				os.WriteFile(strings.TrimSuffix(f, ".caddyfile")+".json", got, 0o644)
				return
			}
			if !jsonEqual(t, got, want) {
				t.Fatalf("adapted:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// The example's caddy.json is the adaptation of its Caddyfile.
func TestExampleJSONMatchesCaddyfile(t *testing.T) {
	got := adapt(t, "../examples/caddy/Caddyfile")
	if os.Getenv("UPDATE_FIXTURES") != "" {
		os.WriteFile("../examples/caddy/caddy.json", got, 0o644)
		return
	}
	want, err := os.ReadFile("../examples/caddy/caddy.json")
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(t, got, want) {
		t.Fatalf("examples/caddy/caddy.json is stale; the Caddyfile adapts to:\n%s", got)
	}
}

func adapt(t *testing.T, path string) []byte {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, warnings, err := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}.Adapt(src, map[string]any{"filename": path})
	if err != nil {
		t.Fatalf("adapt %s: %v", path, err)
	}
	for _, w := range warnings {
		t.Errorf("adapt %s: warning: %s", path, w)
	}
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, out, "", "\t")
	return append(pretty.Bytes(), '\n')
}
