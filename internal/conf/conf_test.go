package conf_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// codes is a conf.Value: several items joined with commas, "bad" refused.
type codes []string

func (c *codes) Set(s string) error {
	*c = nil
	for _, it := range strings.Split(s, ",") {
		switch it {
		case "":
		case "bad":
			return errors.New("bad is not a code")
		default:
			*c = append(*c, it)
		}
	}
	return nil
}

func (c codes) String() string { return strings.Join(c, ",") }

// tracked records the settings marked set on it.
type tracked struct{ marked []string }

func (t *tracked) MarkSet(name string) { t.marked = append(t.marked, name) }

// Base is walked into: its settings are the outer struct's.
type Base struct {
	Name string `json:"name" help:"a name"`
}

// store is a nested struct with a prefix, and a Tracker of its own.
type store struct {
	tracked
	Host string `json:"host" help:"the host"`
	Port int    `json:"port" help:"the port"`
}

// settings has a setting of every kind.
type settings struct {
	tracked
	Base
	Enabled bool           `json:"enabled" help:"on or off"`
	Count   int            `json:"count" help:"how many"`
	Big     int64          `json:"big" help:"a whole int64"`
	Tags    []string       `json:"tags" help:"a list"`
	TTL     time.Duration  `json:"ttl" help:"a duration"`
	Limit   int64          `json:"limit" unit:"bytes" help:"a size"`
	Codes   codes          `json:"codes" help:"a conf.Value"`
	Wait    *time.Duration `json:"wait" help:"a duration behind a pointer"`
	Store   store          `conf:"prefix=store_"`
	Ignored string         // no help tag: not a setting
	Note    string         `json:"note,omitempty" help:"json options are not the name"`
}

var fields = conf.Fields(reflect.TypeFor[settings]())

func field(t *testing.T, name string) conf.Field {
	t.Helper()
	f, ok := conf.Lookup(fields, name)
	if !ok {
		t.Fatalf("no field %q", name)
	}
	return f
}

// Fields lists the settings in declaration order: anonymous structs walked
// into, prefixed structs under their prefix, fields without help left out.
func TestFields(t *testing.T) {
	var names []string
	for _, f := range fields {
		names = append(names, f.Name)
	}
	want := []string{"name", "enabled", "count", "big", "tags", "ttl", "limit", "codes", "wait", "store_host", "store_port", "note"}
	if !slices.Equal(names, want) {
		t.Fatalf("fields %q, want %q", names, want)
	}
	if f := field(t, "store_port"); f.Help != "the port" {
		t.Errorf("help %q", f.Help)
	}
	if _, ok := conf.Lookup(fields, "Ignored"); ok {
		t.Error("a field without a help tag is a setting")
	}
	if _, ok := conf.Lookup(fields, "port"); ok {
		t.Error("a prefixed setting found without its prefix")
	}
	kinds := func(f conf.Field) string {
		var k []string
		for name, is := range map[string]bool{"bool": f.Bool(), "int": f.Int(), "list": f.List(), "duration": f.Duration(), "bytes": f.Bytes()} {
			if is {
				k = append(k, name)
			}
		}
		slices.Sort(k)
		return strings.Join(k, "+")
	}
	for name, want := range map[string]string{
		"name": "", "enabled": "bool", "count": "int", "big": "int", "tags": "list", "ttl": "duration",
		"limit": "bytes", "codes": "list", "wait": "duration", "store_port": "int",
	} {
		if got := kinds(field(t, name)); got != want {
			t.Errorf("%s is %q, want %q", name, got, want)
		}
	}
}

func TestFlagAndEnvNames(t *testing.T) {
	f := field(t, "store_host")
	if f.FlagName() != "store-host" || f.EnvName("IDEMPROXY_") != "IDEMPROXY_STORE_HOST" {
		t.Fatalf("flag %q, variable %q", f.FlagName(), f.EnvName("IDEMPROXY_"))
	}
	if f := field(t, "ttl"); f.FlagName() != "ttl" || f.EnvName("") != "TTL" {
		t.Fatalf("flag %q, variable %q", f.FlagName(), f.EnvName(""))
	}
}

// Set takes each kind's text form, and Text gives it back.
func TestSetAndText(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		text string // Text after Set
	}{
		{"name", []string{"a b"}, "a b"},
		{"enabled", nil, "true"},
		{"enabled", []string{"false"}, "false"},
		{"enabled", []string{"1"}, "true"},
		{"count", []string{" 42 "}, "42"},
		{"count", []string{"-3"}, "-3"},
		{"big", []string{"9007199254740993"}, "9007199254740993"},
		{"tags", []string{"a", "b"}, "a,b"},
		{"tags", nil, ""},
		{"ttl", []string{"500ms"}, "500ms"},
		{"ttl", []string{"2d"}, "48h0m0s"},
		{"ttl", []string{"1d12h"}, "36h0m0s"},
		{"ttl", []string{"0s"}, "0s"},
		{"limit", []string{"10MiB"}, "10MiB"},
		{"limit", []string{"10MB"}, "10000000B"},
		{"limit", []string{"1.5KiB"}, "1536B"},
		{"codes", []string{"x", "y"}, "x,y"},
		{"codes", []string{"x,y"}, "x,y"},
		{"codes", nil, ""},
		{"wait", []string{"5s"}, "5s"},
		{"store_host", []string{"db.internal"}, "db.internal"},
		{"store_port", []string{"6379"}, "6379"},
	} {
		var s settings
		f := field(t, c.name)
		if err := f.Set(&s, c.args...); err != nil {
			t.Errorf("Set(%s, %q): %v", c.name, c.args, err)
			continue
		}
		if got := f.Text(&s); got != c.text {
			t.Errorf("Set(%s, %q), then Text = %q, want %q", c.name, c.args, got, c.text)
		}
		// The text sets the same value again.
		var again settings
		if c.text != "" || f.List() {
			if err := f.Set(&again, textArgs(f, c.text)...); err != nil || !f.Equal(&s, &again) {
				t.Errorf("%s: Text %q does not set the same value: %v", c.name, c.text, err)
			}
		}
	}
	var s settings
	mustSet(t, &s, "ttl", "2d")
	mustSet(t, &s, "limit", "64KiB")
	mustSet(t, &s, "count", "7")
	mustSet(t, &s, "tags", "a", "b")
	mustSet(t, &s, "codes", "x")
	mustSet(t, &s, "name", "n")
	if s.TTL != 48*time.Hour || s.Limit != 64<<10 || s.Count != 7 || !slices.Equal(s.Tags, []string{"a", "b"}) ||
		!slices.Equal(s.Codes, codes{"x"}) || s.Name != "n" {
		t.Fatalf("values after Set: %+v", s)
	}
}

// textArgs is what a list's Text gives back as Set's arguments.
func textArgs(f conf.Field, text string) []string {
	if f.List() {
		if text == "" {
			return nil
		}
		return strings.Split(text, ",")
	}
	return []string{text}
}

func mustSet(t *testing.T, s *settings, name string, args ...string) {
	t.Helper()
	if err := field(t, name).Set(s, args...); err != nil {
		t.Fatalf("Set(%s, %q): %v", name, args, err)
	}
}

// A list Set copies its arguments: the caller's slice is not the setting.
func TestSetListCopies(t *testing.T) {
	var s settings
	args := []string{"a", "b"}
	mustSet(t, &s, "tags", args...)
	args[0] = "changed"
	if s.Tags[0] != "a" {
		t.Fatalf("the setting shares the caller's slice: %q", s.Tags)
	}
	if s.Tags == nil {
		t.Fatal("nil list")
	}
	mustSet(t, &s, "tags")
	if s.Tags == nil || len(s.Tags) != 0 {
		t.Fatalf("Set with no items: %#v, want the empty list", s.Tags)
	}
}

// A pointer field is nil until set: Text is "" and JSON is nil; Set allocates.
func TestPointerField(t *testing.T) {
	var s settings
	f := field(t, "wait")
	if f.Text(&s) != "" || f.JSON(&s) != nil || s.Wait != nil {
		t.Fatalf("unset pointer: Text %q JSON %v", f.Text(&s), f.JSON(&s))
	}
	mustSet(t, &s, "wait", "0s")
	if s.Wait == nil || *s.Wait != 0 || f.Text(&s) != "0s" || f.JSON(&s) != "0s" {
		t.Fatalf("set to 0s: %v %q %v", s.Wait, f.Text(&s), f.JSON(&s))
	}
	mustSet(t, &s, "wait", "1m")
	if *s.Wait != time.Minute {
		t.Fatalf("set again: %v", *s.Wait)
	}
}

// Every wrong text form is an error that says what was wrong, and leaves the
// setting as it was (but a pointer field, which Set allocates before it
// parses: a nil one is left pointing at its zero value).
func TestSetErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"enabled", []string{"yes"}, `"yes" is not a boolean (true or false)`},
		{"enabled", []string{"true", "false"}, "want one value, got 2"},
		{"count", []string{"4.5"}, `"4.5" is not a whole number`},
		{"count", []string{"12abc"}, `"12abc" is not a whole number`},
		{"count", nil, "want one value, got 0"},
		{"count", []string{"1", "2"}, "want one value, got 2"},
		{"big", []string{"99999999999999999999"}, "is not a whole number"},
		{"name", []string{"a", "b"}, "want one value, got 2"},
		{"ttl", []string{"soon"}, `"soon" is not a duration (e.g. 500ms, 30s, 24h, 2d)`},
		{"ttl", []string{"-1s"}, `"-1s": must not be negative`},
		{"ttl", []string{"-2d"}, `"-2d": must not be negative`},
		{"ttl", []string{"30"}, "is not a duration"},
		{"wait", []string{"-1ms"}, "must not be negative"},
		{"limit", []string{"1000"}, `"1000" has no unit: write 1000B for bytes`},
		{"limit", []string{"10XB"}, `unknown unit "XB"`},
		{"limit", []string{"MiB"}, "is not a size"},
		{"limit", []string{"-1MiB"}, "is not a size"},
		{"codes", []string{"a", "bad"}, "bad is not a code"},
	} {
		var s settings
		err := field(t, c.name).Set(&s, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set(%s, %q): %v, want an error containing %q", c.name, c.args, err, c.want)
		}
		if s.Wait != nil && *s.Wait == 0 {
			s.Wait = nil
		}
		if !reflect.DeepEqual(s, settings{}) {
			t.Errorf("Set(%s, %q) failed and changed the settings: %+v", c.name, c.args, s)
		}
	}
}

// SetJSON takes the text form as a JSON string, a number for the numeric kinds
// (a duration in nanoseconds, a size in bytes), a boolean for a boolean, and an
// array for a list.
func TestSetJSON(t *testing.T) {
	for _, c := range []struct {
		name, raw, text string
	}{
		{"name", `"x"`, "x"},
		{"enabled", `true`, "true"},
		{"enabled", `"false"`, "false"},
		{"count", `42`, "42"},
		{"count", `-3`, "-3"},
		{"count", `"7"`, "7"},
		{"big", `9007199254740993`, "9007199254740993"},
		{"ttl", `1000000000`, "1s"},
		{"ttl", `"2d"`, "48h0m0s"},
		{"ttl", `0`, "0s"},
		{"limit", `1024`, "1KiB"},
		{"limit", `"10MiB"`, "10MiB"},
		{"tags", `["a","b"]`, "a,b"},
		{"tags", `["a",1]`, "a,1"},
		{"tags", `[]`, ""},
		{"tags", `"one"`, "one"},
		{"codes", `["x","y"]`, "x,y"},
		{"codes", `"x,y"`, "x,y"},
		{"wait", `"250ms"`, "250ms"},
		{"wait", `5000000`, "5ms"},
		{"store_port", `6380`, "6380"},
	} {
		var s settings
		f := field(t, c.name)
		if err := f.SetJSON(&s, json.RawMessage(c.raw)); err != nil {
			t.Errorf("SetJSON(%s, %s): %v", c.name, c.raw, err)
			continue
		}
		if got := f.Text(&s); got != c.text {
			t.Errorf("SetJSON(%s, %s), then Text = %q, want %q", c.name, c.raw, got, c.text)
		}
	}
}

func TestSetJSONErrors(t *testing.T) {
	for _, c := range []struct {
		name, raw, want string
	}{
		{"count", `true`, "true is a boolean; want a whole number"},
		{"name", `false`, "false is a boolean; want a string"},
		{"ttl", `true`, `true is a boolean; want a duration ("30s", or nanoseconds)`},
		{"limit", `true`, `true is a boolean; want a size ("10MiB", or bytes)`},
		{"tags", `true`, "true is a boolean; want a list of strings"},
		{"enabled", `1`, "1 is a number; want true or false"},
		{"name", `5`, "5 is a number; want a string"},
		{"codes", `5`, "5 is a number; want a list of strings"},
		{"count", `4.5`, "4.5 is not a whole number"},
		{"count", `1e30`, "is not a whole number"},
		{"ttl", `-1`, `-1 is not a duration ("30s", or nanoseconds)`},
		{"ttl", `1.5`, "1.5 is not a duration"},
		{"limit", `-5`, `-5 is not a size ("10MiB", or bytes)`},
		{"count", `["1"]`, "a list; want a whole number"},
		{"name", `["a"]`, "a list; want a string"},
		{"tags", `["a",true]`, "item 1 is not a string"},
		{"tags", `[["a"]]`, "item 0 is not a string"},
		{"tags", `null`, "null; want a list of strings"},
		{"count", `null`, "null; want a whole number"},
		{"name", `{"a":1}`, "want a string"},
		{"count", `{`, "unexpected EOF"},
		{"count", ``, "EOF"},
		{"ttl", `"-1h"`, "must not be negative"},
		{"codes", `["bad"]`, "bad is not a code"},
	} {
		var s settings
		err := field(t, c.name).SetJSON(&s, json.RawMessage(c.raw))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetJSON(%s, %s): %v, want an error containing %q", c.name, c.raw, err, c.want)
		}
		if !reflect.DeepEqual(s, settings{}) {
			t.Errorf("SetJSON(%s, %s) failed and changed the settings: %+v", c.name, c.raw, s)
		}
	}
}

// JSON gives a duration as its text, a size as bytes, a list (and a Value) as
// an array of strings, the rest as they are; SetJSON takes it back.
func TestJSONRoundTrip(t *testing.T) {
	var s settings
	mustSet(t, &s, "name", "n")
	mustSet(t, &s, "enabled")
	mustSet(t, &s, "count", "-2")
	mustSet(t, &s, "ttl", "90m")
	mustSet(t, &s, "limit", "2MiB")
	mustSet(t, &s, "tags", "a", "b")
	mustSet(t, &s, "codes", "x", "y")
	mustSet(t, &s, "wait", "1s")
	mustSet(t, &s, "store_host", "h")
	want := map[string]any{
		"name": "n", "enabled": true, "count": -2, "big": int64(0), "ttl": "1h30m0s", "limit": int64(2 << 20),
		"tags": []string{"a", "b"}, "codes": []string{"x", "y"}, "wait": "1s", "store_host": "h", "store_port": 0, "note": "",
	}
	for _, f := range fields {
		if got := f.JSON(&s); !reflect.DeepEqual(got, want[f.Name]) {
			t.Errorf("JSON(%s) = %#v, want %#v", f.Name, got, want[f.Name])
		}
		raw, err := json.Marshal(f.JSON(&s))
		if err != nil {
			t.Fatal(err)
		}
		var back settings
		if err := f.SetJSON(&back, raw); err != nil || !f.Equal(&s, &back) {
			t.Errorf("%s: SetJSON(%s) after JSON: %v, or another value", f.Name, raw, err)
		}
	}
	// JSON's list is a copy, and an empty Value is the empty array.
	s.Tags = []string{"a"}
	field(t, "tags").JSON(&s).([]string)[0] = "changed"
	if s.Tags[0] != "a" {
		t.Fatal("JSON returned the setting's own slice")
	}
	var empty settings
	if got := field(t, "codes").JSON(&empty); !reflect.DeepEqual(got, []string{}) {
		t.Fatalf("an empty Value's JSON is %#v, want []string{}", got)
	}
}

func TestCopyAndEqual(t *testing.T) {
	var a, b settings
	mustSet(t, &a, "tags", "x")
	mustSet(t, &a, "ttl", "1h")
	f := field(t, "tags")
	if f.Equal(&a, &b) {
		t.Fatal("different lists are Equal")
	}
	f.Copy(&b, &a)
	if !f.Equal(&a, &b) || !slices.Equal(b.Tags, []string{"x"}) {
		t.Fatalf("after Copy: %q", b.Tags)
	}
	if field(t, "ttl").Equal(&a, &b) {
		t.Fatal("Copy of one field copied another")
	}
}

// Set and SetJSON mark the setting on the innermost Tracker on its path: a
// prefixed struct that is a Tracker takes its own settings (under their full
// names); the outer struct takes its own and those of an anonymous struct that
// is not one. A failed Set marks nothing.
func TestTrackerInnermost(t *testing.T) {
	var s settings
	mustSet(t, &s, "count", "1")
	mustSet(t, &s, "name", "n")
	mustSet(t, &s, "store_host", "h")
	if err := field(t, "store_port").SetJSON(&s, json.RawMessage(`6379`)); err != nil {
		t.Fatal(err)
	}
	if err := field(t, "ttl").SetJSON(&s, json.RawMessage(`5`)); err != nil {
		t.Fatal(err)
	}
	if err := field(t, "enabled").SetJSON(&s, json.RawMessage(`true`)); err != nil {
		t.Fatal(err)
	}
	_ = field(t, "limit").Set(&s, "10")                            // refused: no unit
	_ = field(t, "big").SetJSON(&s, json.RawMessage(`"x"`))        // refused
	_ = field(t, "store_port").SetJSON(&s, json.RawMessage(`"x"`)) // refused
	if want := []string{"count", "name", "ttl", "enabled"}; !slices.Equal(s.marked, want) {
		t.Errorf("the outer Tracker marked %q, want %q", s.marked, want)
	}
	if want := []string{"store_host", "store_port"}; !slices.Equal(s.Store.marked, want) {
		t.Errorf("the prefixed struct's Tracker marked %q, want %q", s.Store.marked, want)
	}
	// A struct that is no Tracker is set without complaint.
	type plain struct {
		N int `json:"n" help:"n"`
	}
	var p plain
	if err := conf.Fields(reflect.TypeFor[plain]())[0].Set(&p, "3"); err != nil || p.N != 3 {
		t.Fatalf("no Tracker: %v %d", err, p.N)
	}
}

// DecodeJSON sets every member by setting name, in name order so the first
// error is always the same one, named; a member that names no setting is an
// error unless known says it is the caller's.
func TestDecodeJSON(t *testing.T) {
	obj := func(text string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	var s settings
	err := conf.DecodeJSON(fields, &s, obj(`{"ttl":"2d","tags":["a"],"store_host":"h","limit":1024}`), nil)
	if err != nil || s.TTL != 48*time.Hour || !slices.Equal(s.Tags, []string{"a"}) || s.Store.Host != "h" || s.Limit != 1024 {
		t.Fatalf("decoded: %v %+v", err, s)
	}
	if want := []string{"limit", "tags", "ttl"}; !slices.Equal(s.marked, want) {
		t.Errorf("marked in name order %q, want %q", s.marked, want)
	}
	for range 20 { // map order must not choose the error
		err := conf.DecodeJSON(fields, &settings{}, obj(`{"ttl":"soon","count":"x","tags":true}`), nil)
		if err == nil || !strings.HasPrefix(err.Error(), `count: "x" is not a whole number`) {
			t.Fatalf("two bad members: %v, want the first by name (count)", err)
		}
	}
	if err := conf.DecodeJSON(fields, &settings{}, obj(`{"count":1,"colour":"red"}`), nil); err == nil || err.Error() != `unknown setting "colour"` {
		t.Fatalf("an unknown member: %v", err)
	}
	var asked []string
	known := func(name string) bool { asked = append(asked, name); return name == "colour" }
	if err := conf.DecodeJSON(fields, &s, obj(`{"count":1,"colour":"red"}`), known); err != nil || s.Count != 1 {
		t.Fatalf("a member known to the caller: %v", err)
	}
	if !slices.Equal(asked, []string{"colour"}) {
		t.Fatalf("known was asked about %q; want only the member that names no setting", asked)
	}
	if err := conf.DecodeJSON(fields, &s, obj(`{"shape":"round"}`), known); err == nil || !strings.Contains(err.Error(), `"shape"`) {
		t.Fatalf("a member neither a setting nor known: %v", err)
	}
	if err := conf.DecodeJSON(fields, &s, obj(`{"count":null}`), known); err == nil || err.Error() != "count: null; want a whole number" {
		t.Fatalf("null: %v", err)
	}
}

// EncodeJSON gives the settings keep chooses, as JSON gives them; DecodeJSON
// takes its output back.
func TestEncodeJSON(t *testing.T) {
	var s settings
	mustSet(t, &s, "ttl", "1m")
	mustSet(t, &s, "tags", "a")
	mustSet(t, &s, "store_port", "1")
	var zero settings
	out := conf.EncodeJSON(fields, &s, func(f conf.Field) bool { return !f.Equal(&s, &zero) })
	want := map[string]any{"ttl": "1m0s", "tags": []string{"a"}, "store_port": 1}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("encoded %#v, want %#v", out, want)
	}
	if all := conf.EncodeJSON(fields, &s, func(conf.Field) bool { return true }); len(all) != len(fields) {
		t.Fatalf("keep-all encoded %d of %d settings", len(all), len(fields))
	}
	raw, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	var back settings
	if err := conf.DecodeJSON(fields, &back, m, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if !f.Equal(&s, &back) {
			t.Errorf("%s did not survive EncodeJSON then DecodeJSON", f.Name)
		}
	}
}

// A struct conf cannot serve is a programming error, caught by any test that
// lists its fields: Fields panics naming the field.
func TestFieldsPanicsOnWhatItCannotServe(t *testing.T) {
	type noName struct {
		X string `help:"has help, no json name"`
	}
	type emptyName struct {
		X string `json:",omitempty" help:"an empty json name"`
	}
	type float struct {
		X float64 `json:"x" help:"a float"`
	}
	type mapping struct {
		X map[string]string `json:"x" help:"a map"`
	}
	type ints struct {
		X []int `json:"x" help:"a list of numbers"`
	}
	type bytesOnInt32 struct {
		X int32 `json:"x" unit:"bytes" help:"a size that is no int64"`
	}
	type bytesOnString struct {
		X string `json:"x" unit:"bytes" help:"a size that is a string"`
	}
	type nested struct {
		Inner struct {
			X float32 `json:"x" help:"deep"`
		} `conf:"prefix=in_"`
	}
	for _, c := range []struct {
		typ  reflect.Type
		want string
	}{
		{reflect.TypeFor[noName](), "field X has a help tag but no json name"},
		{reflect.TypeFor[emptyName](), "field X has a help tag but no json name"},
		{reflect.TypeFor[float](), "field x has unsupported type float64"},
		{reflect.TypeFor[mapping](), "field x has unsupported type map[string]string"},
		{reflect.TypeFor[ints](), "field x has unsupported type []int"},
		{reflect.TypeFor[bytesOnInt32](), `field X: unit:"bytes" needs an int64`},
		{reflect.TypeFor[bytesOnString](), `field X: unit:"bytes" needs an int64`},
		{reflect.TypeFor[nested](), "field in_x has unsupported type float32"},
	} {
		func() {
			defer func() {
				p := recover()
				if msg, _ := p.(string); !strings.Contains(msg, c.want) {
					t.Errorf("Fields(%v) panicked with %v, want %q", c.typ, p, c.want)
				}
			}()
			conf.Fields(c.typ)
		}()
	}
	// A struct field without a prefix or help is not walked into, nor a
	// setting.
	type quiet struct {
		Inner struct {
			X float32 `json:"x" help:"never reached"`
		}
	}
	if f := conf.Fields(reflect.TypeFor[quiet]()); len(f) != 0 {
		t.Fatalf("a plain struct field: %v", f)
	}
}
