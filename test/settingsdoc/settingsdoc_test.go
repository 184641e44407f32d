package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/proxy"
)

// docs/settings.md is what go generate ./test/settingsdoc writes from the
// settings' tags, and it holds every setting of every surface: each of the
// proxy's settings with its flag and variable and the default in the code,
// each JSON member (and so Caddyfile subdirective) of the Caddy handler, each
// field of the core's Settings, each option of each store package.
func TestSettingsDoc(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := render(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "settings.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(want)

	t.Run("fresh", func(t *testing.T) {
		if string(got) != text {
			g, w := strings.Split(string(got), "\n"), strings.Split(text, "\n")
			for i := range min(len(g), len(w)) {
				if g[i] != w[i] {
					t.Fatalf("docs/settings.md is not what the tags make (go generate ./test/settingsdoc); line %d is\n%s\nwant\n%s", i+1, g[i], w[i])
				}
			}
			t.Fatalf("docs/settings.md has %d lines, the tags make %d (go generate ./test/settingsdoc)", len(g), len(w))
		}
	})

	t.Run("every proxy setting with its flag, variable and default", func(t *testing.T) {
		rows := settingsRows(text)
		fields := conf.Fields(reflect.TypeFor[proxy.Config]())
		if len(fields) < 25 {
			t.Fatalf("only %d settings found", len(fields))
		}
		def := proxy.DefaultConfig()
		for _, f := range fields {
			row, ok := rows[f.Name]
			if !ok {
				t.Errorf("settings table lacks `%s`", f.Name)
				continue
			}
			if want := "`--" + f.FlagName() + "`, `" + f.EnvName(proxy.EnvPrefix) + "`"; row[1] != want {
				t.Errorf("%s: flag cell %q, want %s", f.Name, row[1], want)
			}
			// The default is the cell before "what it does".
			cell := row[len(row)-2]
			var got proxy.Config
			switch {
			case cell == "none" && f.List():
				_ = f.Set(&got)
			case cell == "none", cell == "off": // an empty string, an empty address
				_ = f.Set(&got, "")
			case cell == "required":
				continue
			default:
				text := strings.Trim(cell, "`")
				if f.List() {
					var items []string
					for _, it := range strings.Split(text, ",") {
						items = append(items, strings.TrimSpace(it))
					}
					if err := f.Set(&got, items...); err != nil {
						t.Errorf("%s: default cell %q: %v", f.Name, cell, err)
					}
				} else if err := f.Set(&got, text); err != nil {
					t.Errorf("%s: default cell %q: %v", f.Name, cell, err)
					continue
				}
			}
			if f.Text(&got) != f.Text(&def) {
				t.Errorf("%s: the settings table says the default is %s, the code says %q", f.Name, cell, f.Text(&def))
			}
		}
	})

	t.Run("every JSON member of the Caddy handler", func(t *testing.T) {
		n := 0
		for _, f := range conf.Fields(handlerType) {
			n++
			if !strings.Contains(text, "| `"+f.Name+"` |") {
				t.Errorf("the settings table lacks the %s subdirective", f.Name)
			}
		}
		for i := range handlerType.NumField() {
			name, _, _ := strings.Cut(handlerType.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			n++
			if !strings.Contains(text, "`"+name) {
				t.Errorf("the settings table lacks the %s subdirective", name)
			}
		}
		if n < 40 {
			t.Fatalf("only %d JSON members found", n)
		}
	})

	t.Run("every Go field and store option", func(t *testing.T) {
		for i := range settingsType.NumField() {
			if name := settingsType.Field(i).Name; !strings.Contains(text, "`"+name+"`") {
				t.Errorf("the settings table lacks Settings.%s", name)
			}
		}
		if n := storeOptions(t, root, text); n < 15 {
			t.Fatalf("found only %d store options", n)
		}
	})
}

// settingsRows returns the rows of the settings tables, keyed by the setting
// name in their first cell, as their cells.
func settingsRows(text string) map[string][]string {
	rows := map[string][]string{}
	name := regexp.MustCompile("^`([a-z_]+)`$")
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 4 {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if m := name.FindStringSubmatch(cells[0]); m != nil {
			rows[m[1]] = cells
		}
	}
	return rows
}

// storeOptions checks that every option of every store package under cache/
// (an exported With… function, an exported field of its Options struct) is
// named in the settings table as package.WithX or package.Options.Field, and
// returns how many it found.
func storeOptions(t *testing.T, root, text string) int {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(root, "cache", "*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, dir := range dirs {
		pkg := filepath.Base(dir)
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				var names []string
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil && strings.HasPrefix(d.Name.Name, "With") && d.Name.IsExported() {
						names = append(names, pkg+"."+d.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						ts, ok := spec.(*ast.TypeSpec)
						if !ok || ts.Name.Name != "Options" {
							continue
						}
						st, ok := ts.Type.(*ast.StructType)
						if !ok {
							continue
						}
						for _, fl := range st.Fields.List {
							for _, fn := range fl.Names {
								if fn.IsExported() {
									names = append(names, pkg+".Options."+fn.Name)
								}
							}
						}
					}
				}
				for _, name := range names {
					n++
					short := "." + name[strings.LastIndex(name, ".")+1:] // `.ConfigOptions` after another Options field
					if !strings.Contains(text, name) && !strings.Contains(text, "`"+short+"`") {
						t.Errorf("the settings table lacks %s", name)
					}
				}
			}
		}
	}
	return n
}
