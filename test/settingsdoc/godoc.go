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
	fl, err := m.structField(owner.PkgPath(), owner.Name(), field)
	if err != nil {
		return "", err
	}
	if fl == nil {
		return "", fmt.Errorf("%s.%s: not found in its package", owner, field)
	}
	text := strings.Join(strings.Fields(fl.Doc.Text()+" "+fl.Comment.Text()), " ")
	if text == "" {
		return "", fmt.Errorf("%s.%s has no doc comment, the description of its row", owner, field)
	}
	return text, nil
}

// hasField reports whether struct type typ of package pkg has a field named
// field.
func (m *model) hasField(pkg, typ, field string) (bool, error) {
	fl, err := m.structField(pkg, typ, field)
	return fl != nil, err
}

// structField returns the declaration of the field named field of struct
// type typ in the source of package pkg (not its tests); nil when there is
// none.
func (m *model) structField(pkg, typ, field string) (*ast.Field, error) {
	dir, err := m.dir(pkg)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok || ts.Name.Name != typ {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						if n.Name == field {
							return fl, nil
						}
					}
				}
			}
		}
	}
	return nil, nil
}

// dir is the directory of the package with import path pkg. go list runs in
// the working directory, this generator's module (go generate and go test run
// there), whose requirements reach every package documented, with or without
// the workspace.
func (m *model) dir(pkg string) (string, error) {
	if d, ok := m.docs[pkg]; ok {
		return d, nil
	}
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", pkg)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w", pkg, err)
	}
	m.docs[pkg] = strings.TrimSpace(string(out))
	return m.docs[pkg], nil
}
