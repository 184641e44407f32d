// Command settingsdoc writes docs/settings.md, the one settings table, from
// the settings themselves: every setting reached from the proxy's
// configuration (proxy.Config) and from the Caddy handler's JSON (with the
// store modules it loads) is a row, with its flag, variable, file key,
// Caddyfile subdirective, Go field and default, and its doc comment as what
// it does; every Go-only field reached from them (json:"-") is a row
// described by its doc comment. The prose around the tables is
// settings.md.tmpl.
//
// It also writes internal/conf/settingshelp_gen.go, the same doc comments as
// a table of help for the program that runs, which has no source to read:
// --help prints it.
//
// Run it with go generate ./test/settingsdoc; its tests fail when
// docs/settings.md or settingshelp_gen.go is not what it writes.
//
//go:generate go run . -o ../../docs/settings.md -go ../../internal/conf/settingshelp_gen.go
package main

import (
	"bytes"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

//go:embed settings.md.tmpl
var page string

func main() {
	out := flag.String("o", "", "write docs/settings.md to this file (default: standard output)")
	goOut := flag.String("go", "", "write the help table, internal/conf/settingshelp_gen.go, to this file")
	flag.Parse()
	root, err := moduleRoot()
	if err == nil {
		var text, src []byte
		if text, src, err = render(root); err == nil {
			if *out == "" {
				_, err = os.Stdout.Write(text)
			} else {
				err = os.WriteFile(*out, text, 0o644)
			}
			if err == nil && *goOut != "" {
				err = os.WriteFile(*goOut, src, 0o644)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "settingsdoc:", err)
		os.Exit(1)
	}
}

// render returns docs/settings.md and internal/conf/settingshelp_gen.go.
func render(root string) (text, src []byte, err error) {
	m, err := newModel(root)
	if err != nil {
		return nil, nil, err
	}
	core, _ := m.coreTable()
	proxyTable, err := m.proxyTable() // the first error of either
	if err != nil {
		return nil, nil, err
	}
	var b bytes.Buffer
	tmpl := template.Must(template.New("settings.md.tmpl").Option("missingkey=error").Parse(page))
	if err := tmpl.Execute(&b, map[string]string{"Core": core, "Proxy": proxyTable}); err != nil {
		return nil, nil, err
	}
	src, err = m.helpTable()
	return b.Bytes(), src, err
}

// moduleRoot is the nearest directory above the working directory whose
// go.mod is the root module's (github.com/idemproxy/idemproxy): this
// generator is a module of its own, nested in the repository it documents.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isRootModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/idemproxy/idemproxy above the working directory")
		}
		dir = parent
	}
}

// isRootModule reports whether the go.mod text declares the root module.
func isRootModule(gomod []byte) bool {
	for line := range strings.Lines(string(gomod)) {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(path), `"`) == "github.com/idemproxy/idemproxy"
		}
	}
	return false
}
