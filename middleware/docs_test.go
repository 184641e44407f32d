package middleware_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
)

// Every field of the core's Settings, and every field of the stores' Options,
// is in the settings table: a Go user finds each in the one table.
func TestSettingsTableListsEverySetting(t *testing.T) {
	table := testutil.Docs(t, testutil.SettingsDoc)
	st := reflect.TypeFor[middleware.Settings]()
	for i := range st.NumField() {
		if name := st.Field(i).Name; !strings.Contains(table, "`"+name+"`") {
			t.Errorf("the settings table lacks Settings.%s", name)
		}
	}
	n := 0
	for dir, prefix := range map[string]string{"../cache/memstore": "memstore.", "../cache/redisstore": "redisstore."} {
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
			ast.Inspect(f, func(node ast.Node) bool {
				ts, ok := node.(*ast.TypeSpec)
				if !ok || ts.Name.Name != "Options" {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return true
				}
				for _, fl := range st.Fields.List {
					for _, name := range fl.Names {
						n++
						if !strings.Contains(table, prefix+"Options."+name.Name) {
							t.Errorf("the settings table lacks %sOptions.%s", prefix, name.Name)
						}
					}
				}
				return false
			})
		}
	}
	if n < 5 {
		t.Fatalf("found only %d store options", n)
	}
}
