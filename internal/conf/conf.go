// Package conf derives every surface of a settings struct (command-line flags,
// environment variables, the config file, Caddy's JSON and Caddyfile
// subdirectives, --help, the settings table in docs/settings.md) from the struct itself, so a
// setting is declared once: a field with a json name and a doc comment.
//
// A field is a setting when it has a json name (not "-", and no `conf:"-"`
// tag); its name is its json name. Its doc comment is its help: go generate
// ./test/settingsdoc reads the comments and writes them, as phrases, into
// this package's help table (settingshelp_gen.go), which Fields reads at run
// time (help.go). Help may name a list a registry keeps, ${name}, which the
// struct's HelpList fills (Lister).
//
// Kinds, by the field's Go type:
//
//   - string, bool, int, int64, []string;
//   - time.Duration: text in Go syntax or with days ("500ms", "24h", "2d"), never
//     negative; a JSON number is nanoseconds;
//   - int64 tagged `unit:"bytes"`: text is a size with its unit ("10MiB", "10MB",
//     "512B"); a JSON number is bytes. Tagged `size:"auto"` as well, it also
//     takes "auto" (SizeAuto: the program sizes it) and "off" (0);
//   - a type whose pointer implements Value: its text, several values joined with
//     commas.
//
// Anonymous struct fields are walked into. A named struct field tagged
// `conf:"prefix=P"` is walked into with P in front of its settings' names; so is
// each section of a field whose pointer is a Sections, structs known only at
// run time (the proxy's redis_prefix is the Redis store's prefix, a section of
// the registry of stores).
//
// What a configuration reload does with a changed setting is its `reload` tag
// (Field.Reload), read by the proxy's reload and the stores' identity
// (internal/stores.Key): none, the new value takes effect (a store setting:
// the store is opened again); "live", it is applied to what runs, which is
// kept (the memory store's bounds: its records stay); "restart", the running
// value is kept, and the reload says so; "restart-on-off", a change between
// empty (off) and a value (on) is kept until a restart, any other takes effect
// (TLS: its files are read again, turning it on or off needs a restart).
//
// A setting that only means something while another is on has a `needs` tag
// (Field.Needs): `needs:"webhook"` (the setting webhook is set) or
// `needs:"store=redis"` (the setting store selects a Redis store). On a
// prefixed struct field, or a section (Section.Tag), it applies to every
// setting inside. CheckNeeds, the
// one check of it, refuses such a setting set while its feature is off.
//
// The other tags are for the settings table, docs/settings.md, which `go
// generate ./test/settingsdoc` writes from them and the doc comments: `go` (the Go column,
// when the field is not the Go setting itself), `caddy` (the Caddy column of a
// proxy setting Caddy has no subdirective for) and `default` (the default
// column, when the default value's text is not what to show).
package conf

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Value is a setting type with a text form of its own.
type Value interface {
	Set(string) error
	String() string
}

var (
	valueType    = reflect.TypeFor[Value]()
	durationType = reflect.TypeFor[time.Duration]()
)

// Reload tag values (see the package comment).
const (
	ReloadLive         = "live"
	ReloadRestart      = "restart"
	ReloadRestartOnOff = "restart-on-off"
)

// Field is one setting of a struct type.
type Field struct {
	Name string // the json name: lock_ttl
	// Help is the setting's description: its doc comment, the one text Go's
	// documentation, --help and the settings table show, as a phrase. 'x'
	// marks x as a literal (code in the table).
	Help string
	// Reload is what a reload does when the setting changes: "" (it takes
	// effect), ReloadLive, ReloadRestart or ReloadRestartOnOff.
	Reload string
	// Needs is the feature the setting applies to: "webhook" (that setting
	// is set) or "store=redis" (that setting's value is redis); "" when it
	// always applies. CheckNeeds checks it.
	Needs string
	// StructField is the Go field, and Owner the struct type that declares it
	// (a section's struct, for a setting in a section).
	StructField reflect.StructField
	Owner       reflect.Type
	// Outer are the prefixed struct fields the setting is inside, outermost
	// first; a section is one, named by its prefix and tagged with its Tag.
	Outer []reflect.StructField
	index []int
	typ   reflect.Type
	bytes bool     // an int64 counted in bytes (a size)
	auto  bool     // a size that may be "auto" (SizeAuto) or "off" (0)
	in    *section // the section the setting is in (sections.go); index leads to its Sections
}

// kinds of field.
const (
	kString = iota
	kBool
	kInt
	kDuration
	kBytes
	kList
	kValue
)

func (f Field) kind() int {
	t := deref(f.typ)
	switch {
	case reflect.PointerTo(t).Implements(valueType):
		return kValue
	case t == durationType:
		return kDuration
	case f.bytes:
		return kBytes
	case t.Kind() == reflect.String:
		return kString
	case t.Kind() == reflect.Bool:
		return kBool
	case t.Kind() == reflect.Int64 || t.Kind() == reflect.Int:
		return kInt
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return kList
	}
	panic(fmt.Sprintf("conf: field %s has unsupported type %v", f.Name, f.typ))
}

// Bool reports whether the field is a boolean (a flag without a value).
func (f Field) Bool() bool { return f.kind() == kBool }

// Int reports whether the field is a whole number.
func (f Field) Int() bool { return f.kind() == kInt }

// List reports whether the field takes several values (a list, or a Value that
// joins them).
func (f Field) List() bool { k := f.kind(); return k == kList || k == kValue }

// Duration reports whether the field is a duration.
func (f Field) Duration() bool { return f.kind() == kDuration }

// Bytes reports whether the field is a size in bytes.
func (f Field) Bytes() bool { return f.kind() == kBytes }

// FlagName is the field's command-line flag: lock_ttl → lock-ttl.
func (f Field) FlagName() string { return strings.ReplaceAll(f.Name, "_", "-") }

// EnvName is the field's environment variable under prefix: IDEMPROXY_ + LOCK_TTL.
func (f Field) EnvName(prefix string) string { return prefix + strings.ToUpper(f.Name) }

func deref(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

// value is the field in *ptr, behind its pointer (allocated when nil and
// alloc).
func (f Field) value(ptr any, alloc bool) (reflect.Value, bool) {
	v := f.field(ptr)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			if !alloc {
				return reflect.Value{}, false
			}
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	return v, true
}

// Set sets the field in *ptr from its text form. A list takes its items as args
// (none is the empty list); a Value takes them joined with commas; a boolean
// takes no argument (true) or one; every other kind takes exactly one.
func (f Field) Set(ptr any, args ...string) error {
	if err := f.set(ptr, args...); err != nil {
		return err
	}
	f.markSet(ptr)
	return nil
}

func (f Field) set(ptr any, args ...string) error {
	k := f.kind()
	if k == kBool && len(args) == 0 {
		args = []string{"true"}
	}
	switch {
	case k == kList:
		v, _ := f.value(ptr, true)
		v.Set(reflect.ValueOf(append([]string{}, args...)))
		return nil
	case k == kValue:
		nv := reflect.New(deref(f.typ))
		if err := nv.Interface().(Value).Set(strings.Join(args, ",")); err != nil {
			return err
		}
		v, _ := f.value(ptr, true)
		v.Set(nv.Elem())
		return nil
	case len(args) != 1:
		return fmt.Errorf("want one value, got %d", len(args))
	}
	s := args[0]
	v, _ := f.value(ptr, true)
	switch k {
	case kString:
		v.SetString(s)
	case kBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", s)
		}
		v.SetBool(b)
	case kInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		v.SetInt(n)
	case kDuration:
		d, err := ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 500ms, 30s, 24h, 2d)", s)
		}
		if d < 0 {
			return fmt.Errorf("%q: must not be negative", s)
		}
		v.SetInt(int64(d))
	case kBytes:
		switch t := strings.ToLower(strings.TrimSpace(s)); {
		case f.auto && t == "auto":
			v.SetInt(SizeAuto)
			return nil
		case f.auto && t == "off":
			v.SetInt(0)
			return nil
		}
		n, err := ParseSize(s)
		if err != nil {
			if f.auto {
				return fmt.Errorf("%w; or auto, or off", err)
			}
			return err
		}
		v.SetInt(n)
	}
	return nil
}

// SizeAuto is the value of a size tagged `size:"auto"` set to "auto": what
// reads it picks the size.
const SizeAuto = -1

// SetJSON sets the field in *ptr from a JSON value: its text form as a string
// (or, for a list, an array of strings), or a number (a duration in
// nanoseconds, a size in bytes, a whole number), or a boolean.
func (f Field) SetJSON(ptr any, raw json.RawMessage) error {
	var x any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil {
		return err
	}
	switch x := x.(type) {
	case string:
		return f.Set(ptr, x)
	case bool:
		if f.kind() != kBool {
			return fmt.Errorf("%v is a boolean; want %s", x, f.want())
		}
		return f.Set(ptr, strconv.FormatBool(x))
	case json.Number:
		switch f.kind() {
		case kInt, kDuration, kBytes:
			n, err := x.Int64()
			if err != nil || n < 0 && f.kind() != kInt {
				return fmt.Errorf("%s is not %s", x, f.want())
			}
			v, _ := f.value(ptr, true)
			v.SetInt(n)
			f.markSet(ptr)
			return nil
		}
		return fmt.Errorf("%s is a number; want %s", x, f.want())
	case []any:
		if !f.List() {
			return fmt.Errorf("a list; want %s", f.want())
		}
		items := make([]string, len(x))
		for i, it := range x {
			switch it := it.(type) {
			case string:
				items[i] = it
			case json.Number:
				items[i] = it.String()
			default:
				return fmt.Errorf("item %d is not a string", i)
			}
		}
		return f.Set(ptr, items...)
	case nil:
		return fmt.Errorf("null; want %s", f.want())
	}
	return fmt.Errorf("want %s", f.want())
}

// want says what the field takes, for errors.
func (f Field) want() string {
	switch f.kind() {
	case kBool:
		return "true or false"
	case kInt:
		return "a whole number"
	case kDuration:
		return "a duration (\"30s\", or nanoseconds)"
	case kBytes:
		if f.auto {
			return "a size (\"10MiB\", or bytes), auto or off"
		}
		return "a size (\"10MiB\", or bytes)"
	case kList, kValue:
		return "a list of strings"
	}
	return "a string"
}

// Text returns the field's value in *ptr in its text form; a list is joined
// with commas, a nil pointer is "".
func (f Field) Text(ptr any) string {
	v, ok := f.value(ptr, false)
	if !ok {
		return ""
	}
	switch f.kind() {
	case kList:
		return strings.Join(v.Interface().([]string), ",")
	case kValue:
		pv := reflect.New(v.Type())
		pv.Elem().Set(v)
		return pv.Interface().(Value).String()
	case kDuration:
		return FormatDuration(time.Duration(v.Int()))
	case kBytes:
		if f.auto && v.Int() < 0 {
			return "auto"
		}
		if f.auto && v.Int() == 0 {
			return "off"
		}
		return FormatSize(v.Int())
	}
	return fmt.Sprint(v.Interface())
}

// JSON returns the field's value in *ptr as a JSON value: a duration as its
// text, a size as bytes, a Value as its text, the rest as they are.
func (f Field) JSON(ptr any) any {
	v, ok := f.value(ptr, false)
	if !ok {
		return nil
	}
	switch f.kind() {
	case kDuration:
		return f.Text(ptr)
	case kBytes:
		if f.auto && v.Int() < 0 {
			return "auto"
		}
	case kValue: // a list joined with commas
		if t := f.Text(ptr); t != "" {
			return strings.Split(t, ",")
		}
		return []string{}
	case kList:
		return append([]string{}, v.Interface().([]string)...)
	}
	return v.Interface()
}

// Copy sets the field in *dst to its value in *src (same struct type).
func (f Field) Copy(dst, src any) {
	f.field(dst).Set(f.field(src))
}

// Equal reports whether the field holds the same value in *a and *b.
func (f Field) Equal(a, b any) bool {
	return reflect.DeepEqual(f.field(a).Interface(), f.field(b).Interface())
}
