package conf

import (
	"fmt"
	"reflect"
	"strings"
)

// The settings of a struct type, found by walking it: its fields with a json
// name, in anonymous and prefixed struct fields and sections (sections.go).

// Fields lists the settings of struct type t, in declaration order, each with
// its help (help.go). It panics on a setting of a kind it does not know: a
// programming error, caught by any test that builds the list.
func Fields(t reflect.Type) []Field { return FieldsWith(t, help) }

// FieldsWith is Fields with the help of each setting from help instead of
// the table generated from the doc comments: test/settingsdoc, which
// makes that table, reads the comments themselves.
func FieldsWith(t reflect.Type, help HelpFunc) []Field {
	var out []Field
	walk(t, nil, "", nil, help, &out)
	expandLists(t, out)
	return out
}

// walk appends the settings of struct type t to out, index leading to t,
// prefix in front of their names and outer the prefixed struct fields t is
// inside.
func walk(t reflect.Type, index []int, prefix string, outer []reflect.StructField, help HelpFunc, out *[]Field) {
	for i := range t.NumField() {
		sf := t.Field(i)
		idx := append(append([]int(nil), index...), i)
		if sections, ok := sectionsOf(sf.Type); ok {
			walkSections(sections, idx, prefix, outer, help, out)
			continue
		}
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			walk(sf.Type, idx, prefix, outer, help, out)
			continue
		}
		if p, ok := strings.CutPrefix(sf.Tag.Get("conf"), "prefix="); ok && sf.Type.Kind() == reflect.Struct {
			walk(sf.Type, idx, prefix+p, append(append([]reflect.StructField(nil), outer...), sf), help, out)
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" || sf.Tag.Get("conf") == "-" {
			continue
		}
		text := help(t, sf)
		if name == "" {
			if text != "" {
				panic(fmt.Sprintf("conf: field %s has help but no json name", sf.Name))
			}
			continue
		}
		f := Field{Name: prefix + name, Help: text, Reload: sf.Tag.Get("reload"), StructField: sf, Owner: t, Outer: outer,
			index: idx, typ: sf.Type, bytes: sf.Tag.Get("unit") == "bytes", auto: sf.Tag.Get("size") == "auto"}
		f.Needs, _ = f.Tag("needs")
		switch f.Reload {
		case "", ReloadLive, ReloadRestart, ReloadRestartOnOff:
		default:
			panic(fmt.Sprintf("conf: field %s: reload:%q, want %q, %q or %q", sf.Name, f.Reload, ReloadLive, ReloadRestart, ReloadRestartOnOff))
		}
		if f.bytes && deref(f.typ).Kind() != reflect.Int64 {
			panic(fmt.Sprintf("conf: field %s: unit:\"bytes\" needs an int64", sf.Name))
		}
		if f.auto && !f.bytes {
			panic(fmt.Sprintf("conf: field %s: size:\"auto\" needs unit:\"bytes\"", sf.Name))
		}
		f.kind() // panics on an unsupported type
		*out = append(*out, f)
	}
}

// Tag returns the value of the field's tag key, or else of the innermost
// prefixed struct field (or section) it is inside that has one.
func (f Field) Tag(key string) (string, bool) {
	if v, ok := f.StructField.Tag.Lookup(key); ok {
		return v, true
	}
	for i := len(f.Outer) - 1; i >= 0; i-- {
		if v, ok := f.Outer[i].Tag.Lookup(key); ok {
			return v, true
		}
	}
	return "", false
}

// Lookup returns the field named name.
func Lookup(fields []Field, name string) (Field, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}
