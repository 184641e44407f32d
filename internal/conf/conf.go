// Package conf derives every textual surface of a settings struct (command-line
// flags, environment variables, Caddyfile subdirectives, --help) from the struct
// itself, so a setting is declared once: a field with a json name and a help tag.
//
// A field is a setting when it has a `help` tag. Its name is its json name. Kinds:
// string, bool, int64, []string, and any type T whose *T has Set(string) error and
// String() string (Duration, Size), each either plain or behind a pointer (a nil
// pointer or a nil slice is "unset"). Anonymous struct fields are walked into.
package conf

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Value is a setting type with a text form.
type Value interface {
	Set(string) error
	String() string
}

var valueType = reflect.TypeFor[Value]()

// Field is one setting of a struct type.
type Field struct {
	Name  string // the json name: lock_ttl
	Help  string
	index []int
	typ   reflect.Type // the field's type
}

// Bool reports whether the field is a boolean (a flag without a value).
func (f Field) Bool() bool { return deref(f.typ).Kind() == reflect.Bool }

// Int reports whether the field is an integer.
func (f Field) Int() bool { return deref(f.typ).Kind() == reflect.Int64 }

// List reports whether the field is a list of strings.
func (f Field) List() bool { return f.typ.Kind() == reflect.Slice }

// FlagName is the field's command-line flag: lock_ttl → lock-ttl.
func (f Field) FlagName() string { return strings.ReplaceAll(f.Name, "_", "-") }

// EnvName is the field's environment variable under prefix: IDEMPROXY_ + LOCK_TTL.
func (f Field) EnvName(prefix string) string { return prefix + strings.ToUpper(f.Name) }

// Fields lists the settings of struct type t, in declaration order.
func Fields(t reflect.Type) []Field {
	var out []Field
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			idx := append(append([]int(nil), index...), i)
			if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, idx)
				continue
			}
			help, ok := sf.Tag.Lookup("help")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "" {
				panic(fmt.Sprintf("conf: field %s has a help tag but no json name", sf.Name))
			}
			out = append(out, Field{Name: name, Help: help, index: idx, typ: sf.Type})
		}
	}
	walk(t, nil)
	return out
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

func deref(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

func (f Field) value(ptr any) reflect.Value { return reflect.ValueOf(ptr).Elem().FieldByIndex(f.index) }

// IsSet reports whether the field is set in *ptr: not its zero value. A nil pointer
// or slice is unset; a pointer to a zero and an empty, non-nil list are set.
func (f Field) IsSet(ptr any) bool { return !f.value(ptr).IsZero() }

// Set sets the field in *ptr from its text form. A list takes its items as args (an
// empty list is a value: set and empty); a boolean takes no argument (true) or one;
// every other kind takes exactly one.
func (f Field) Set(ptr any, args ...string) error {
	v := f.value(ptr)
	if v.Kind() == reflect.Slice {
		v.Set(reflect.ValueOf(append([]string{}, args...)))
		return nil
	}
	t := deref(f.typ)
	if t.Kind() == reflect.Bool && len(args) == 0 {
		args = []string{"true"}
	}
	if len(args) != 1 {
		return fmt.Errorf("want one value, got %d", len(args))
	}
	nv := reflect.New(t) // *T
	switch {
	case reflect.PointerTo(t).Implements(valueType):
		if err := nv.Interface().(Value).Set(args[0]); err != nil {
			return err
		}
	case t.Kind() == reflect.String:
		nv.Elem().SetString(args[0])
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(args[0])
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", args[0])
		}
		nv.Elem().SetBool(b)
	case t.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", args[0])
		}
		nv.Elem().SetInt(n)
	default:
		panic(fmt.Sprintf("conf: field %s has unsupported type %v", f.Name, f.typ))
	}
	if v.Kind() == reflect.Pointer {
		v.Set(nv)
	} else {
		v.Set(nv.Elem())
	}
	return nil
}

// Text returns the field's value in *ptr in its text form ("" when unset); lists
// are joined with commas.
func (f Field) Text(ptr any) string {
	if !f.IsSet(ptr) {
		return ""
	}
	v := f.value(ptr)
	if v.Kind() == reflect.Slice {
		return strings.Join(v.Interface().([]string), ",")
	}
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if pv := reflect.New(v.Type()); pv.Type().Implements(valueType) {
		pv.Elem().Set(v)
		return pv.Interface().(Value).String()
	}
	return fmt.Sprint(v.Interface())
}

// Merge copies every field that is set in *src over the same field of *dst. Both
// point to the same struct type.
func Merge(fields []Field, dst, src any) {
	for _, f := range fields {
		if f.IsSet(src) {
			f.value(dst).Set(f.value(src))
		}
	}
}
