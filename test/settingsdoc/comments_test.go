package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// internal/conf/settingshelp_gen.go, the help the program reads at run time
// (--help), is what go generate ./test/settingsdoc writes from the doc
// comments.
func TestSettingsHelpFresh(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	_, want, err := render(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "internal", "conf", "settingshelp_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("internal/conf/settingshelp_gen.go is stale (go generate ./test/settingsdoc); line %d is\n%s\nwant\n%s", i+1, g[i], w[i])
			}
		}
		t.Fatalf("internal/conf/settingshelp_gen.go has %d lines, the doc comments make %d (go generate ./test/settingsdoc)", len(g), len(w))
	}
	// What the program reads is what the comments say, lists filled in.
	for _, f := range conf.Fields(proxyType) {
		if f.Help == "" {
			t.Errorf("%s: no help at run time", f.Name)
		}
	}
}

// Every setting has a doc comment, its documentation, that states its
// default; the Caddy handler's JSON, as Caddy's documentation reads it from
// the fields of the module's struct (embedded structs included), has a doc
// comment on every field.
func TestSettingsDocumented(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	m, err := newModel(root)
	if err != nil {
		t.Fatal(err) // a setting without a doc comment is newModel's error
	}
	fields := append(append([]conf.Field(nil), m.proxy...), m.core...)
	for _, sm := range m.modules {
		fields = append(fields, sm.fields...)
	}
	if len(fields) < 80 {
		t.Fatalf("only %d settings found", len(fields))
	}
	for _, f := range fields {
		key := conf.HelpKey(f.Owner, f.StructField.Name)
		if m.phrases[key] == "" {
			t.Errorf("%s (%s) has no doc comment", f.Name, key)
		}
		if m.stated[key] == "" {
			t.Errorf("%s (%s): its doc comment states no default (a last paragraph \"Default: ….\")", f.Name, key)
		}
	}
	if _, err := m.coreTable(); err != nil {
		t.Error(err) // a stated default that is not the code's
	}
	if _, err := m.proxyTable(); err != nil {
		t.Error(err)
	}

	n := 0
	var walk func(t reflect.Type)
	walk = func(typ reflect.Type) {
		for i := range typ.NumField() {
			sf := typ.Field(i)
			if !sf.IsExported() || sf.Tag.Get("json") == "-" {
				continue
			}
			n++
			if _, err := m.findDoc(typ, sf.Name); err != nil {
				t.Errorf("Caddy's JSON: %v", err)
			}
			if sf.Type.Kind() == reflect.Struct && (sf.Anonymous || strings.HasPrefix(sf.Tag.Get("conf"), "prefix=")) {
				walk(sf.Type)
			}
		}
	}
	walk(handlerType)
	if n < 50 {
		t.Fatalf("only %d fields of the Caddy handler found", n)
	}
}

// A doc comment is help as a phrase, and its last paragraph the default.
func TestPhrase(t *testing.T) {
	for _, c := range []struct{ doc, help, stated string }{
		{"How long a completed response is kept for replay.\n\nDefault: 24h.\n", "how long a completed response is kept for replay", "24h"},
		{"Retry-After sent with '409'.\n\nDefault: 1s.\n", "Retry-After sent with '409'", "1s"},
		{"PEM private key of tls_cert; read again\non SIGHUP.\n\nDefault: none.\n", "PEM private key of tls_cert; read again on SIGHUP", "none"},
		{"In-flight lease. At least 3ms.\n\nDefault: 30s.\n", "in-flight lease. At least 3ms", "30s"},
		{"'auto' or 'json'.\n\nDefault: auto.\n", "'auto' or 'json'", "auto"},
		{"Prefix of every Redis key.\n\nDefault: idem:.\n", "prefix of every Redis key", "idem:"},
		{"No default stated.\n", "no default stated", ""},
		{"Two paragraphs.\n\nThe second.\n\nDefault: 2.\n", "two paragraphs. The second", "2"},
	} {
		help, stated := phrase(c.doc)
		if help != c.help || stated != c.stated {
			t.Errorf("phrase(%q) = %q, %q; want %q, %q", c.doc, help, stated, c.help, c.stated)
		}
	}
}
