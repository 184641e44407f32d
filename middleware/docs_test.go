package middleware_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every exported option (With…) of the core and the stores is in the README.
func TestREADMEListsEveryOption(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for dir, prefix := range map[string]string{".": "", "../cache/memstore": "memstore.", "../cache/redisstore": "redisstore."} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "With") {
					continue
				}
				n++
				if !strings.Contains(string(readme), prefix+fn.Name.Name) {
					t.Errorf("README lacks %s%s", prefix, fn.Name.Name)
				}
			}
		}
	}
	if n < 25 {
		t.Fatalf("found only %d options", n)
	}
}
