package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
)

// docComment returns the doc comment of field of struct type owner, on one
// line: the description of a row that has no help tag (a Go-only field, a
// Caddy-only JSON member). A field without one fails (m.fail): its row would
// say nothing.
func (m *model) docComment(owner reflect.Type, field string) string {
	text, err := m.findDoc(owner, field)
	if err != nil {
		m.fail(err)
	}
	return text
}

func (m *model) findDoc(owner reflect.Type, field string) (string, error) {
	dir, err := m.dir(owner.PkgPath())
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return "", err
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok || ts.Name.Name != owner.Name() {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						if n.Name != field {
							continue
						}
						text := strings.Join(strings.Fields(fl.Doc.Text()+" "+fl.Comment.Text()), " ")
						if text == "" {
							return "", fmt.Errorf("%s.%s has no doc comment, the description of its row", owner, field)
						}
						return text, nil
					}
				}
			}
		}
	}
	return "", fmt.Errorf("%s.%s: not found in %s", owner, field, dir)
}

// dir is the directory of the package with import path pkg.
func (m *model) dir(pkg string) (string, error) {
	if d, ok := m.docs[pkg]; ok {
		return d, nil
	}
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", pkg)
	cmd.Dir = m.root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w", pkg, err)
	}
	m.docs[pkg] = strings.TrimSpace(string(out))
	return m.docs[pkg], nil
}
