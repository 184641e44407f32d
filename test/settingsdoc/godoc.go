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
	"unicode"
	"unicode/utf8"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// docComment returns the doc comment of field of struct type owner, on one
// line: the description of a row that is no setting (a Go-only field, a
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

// help is the conf.HelpFunc of the settings this generator walks: a
// setting's doc comment as --help and the table show it (phrase), recorded
// in m.phrases for settingshelp_gen.go and its stated default in m.stated.
// A setting without a doc comment fails (m.fail).
func (m *model) help(owner reflect.Type, sf reflect.StructField) string {
	if name, _, _ := strings.Cut(sf.Tag.Get("json"), ","); name == "" {
		return "" // not a setting: its doc comment is no help
	}
	key := conf.HelpKey(owner, sf.Name)
	if text, ok := m.phrases[key]; ok {
		return text
	}
	fl, err := m.structField(owner.PkgPath(), owner.Name(), sf.Name)
	if err == nil && (fl == nil || fl.Doc == nil) {
		err = fmt.Errorf("setting %s has no doc comment: its documentation, which go doc, --help and docs/settings.md show", goName(owner, sf.Name))
	}
	if err != nil {
		m.fail(err)
		return ""
	}
	text, stated := phrase(fl.Doc.Text())
	m.phrases[key], m.stated[key] = text, stated
	return text
}

// phrase returns the help a setting's doc comment makes, and the default its
// last paragraph states ("Default: 24h."; "" when it states none). The help is
// the rest on one line as a phrase: its final period dropped, its first
// letter in lower case unless its first word is a name written so
// (Retry-After, PEM, PostgreSQL's): the comment "How long a completed
// response is kept for replay." is the help "how long a completed response
// is kept for replay".
func phrase(doc string) (help, stated string) {
	paras := strings.Split(strings.TrimSpace(doc), "\n\n")
	if last, ok := strings.CutPrefix(paras[len(paras)-1], "Default: "); ok && len(paras) > 1 {
		stated = strings.TrimSuffix(strings.Join(strings.Fields(last), " "), ".")
		paras = paras[:len(paras)-1]
	}
	help = strings.TrimSuffix(strings.Join(strings.Fields(strings.Join(paras, " ")), " "), ".")
	first, _, _ := strings.Cut(help, " ")
	if r, size := utf8.DecodeRuneInString(first); unicode.IsUpper(r) && strings.IndexFunc(first[size:], unicode.IsUpper) < 0 {
		help = string(unicode.ToLower(r)) + help[size:]
	}
	return help, stated
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
					if len(fl.Names) == 0 && embeddedName(fl.Type) == field {
						return fl, nil
					}
				}
			}
		}
	}
	return nil, nil
}

// embeddedName is the name of an embedded field of type expression x:
// Settings for middleware.Settings or *Settings.
func embeddedName(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.StarExpr:
		return embeddedName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.Ident:
		return x.Name
	}
	return ""
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
