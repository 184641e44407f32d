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
	Port int    `json:"port" reload:"live" help:"the port"`
}

// settings has a setting of every kind.
type settings struct {
	tracked
	Base
	Enabled bool           `json:"enabled" help:"on or off"`
	Count   int            `json:"count" reload:"restart" help:"how many"`
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
	for name, want := range map[string]string{"name": "", "count": conf.ReloadRestart, "store_port": conf.ReloadLive, "store_host": ""} {
		if got := field(t, name).Reload; got != want {
			t.Errorf("%s: Reload %q, want %q", name, got, want)
		}
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
	type reloadWhen struct {
		X string `json:"x" reload:"later" help:"a reload tag it does not know"`
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
		{reflect.TypeFor[noName](), "field X has help but no json name"},
		{reflect.TypeFor[emptyName](), "field X has help but no json name"},
		{reflect.TypeFor[float](), "field x has unsupported type float64"},
		{reflect.TypeFor[mapping](), "field x has unsupported type map[string]string"},
		{reflect.TypeFor[ints](), "field x has unsupported type []int"},
		{reflect.TypeFor[bytesOnInt32](), `field X: unit:"bytes" needs an int64`},
		{reflect.TypeFor[bytesOnString](), `field X: unit:"bytes" needs an int64`},
		{reflect.TypeFor[nested](), "field in_x has unsupported type float32"},
		{reflect.TypeFor[reloadWhen](), `field X: reload:"later", want "live", "restart" or "restart-on-off"`},
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
