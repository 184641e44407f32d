package conf_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/conf"
)

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

// A size tagged size:"auto" takes "auto" and "off" besides sizes, writes them
// back as such, and is still refused anything else; an untagged size takes
// neither.
func TestAutoSize(t *testing.T) {
	type sized struct {
		Cache int64 `json:"cache" unit:"bytes" size:"auto" help:"a size the program may pick"`
		Plain int64 `json:"plain" unit:"bytes" help:"a size"`
	}
	fs := conf.Fields(reflect.TypeFor[sized]())
	c, _ := conf.Lookup(fs, "cache")
	p, _ := conf.Lookup(fs, "plain")
	for _, tc := range []struct {
		in   string
		want int64
		text string
	}{{"auto", conf.SizeAuto, "auto"}, {" AUTO ", conf.SizeAuto, "auto"}, {"off", 0, "off"}, {"0B", 0, "off"}, {"64MiB", 64 << 20, "64MiB"}} {
		var s sized
		if err := c.Set(&s, tc.in); err != nil || s.Cache != tc.want {
			t.Fatalf("Set(cache, %q) = %d, %v; want %d", tc.in, s.Cache, err, tc.want)
		}
		if got := c.Text(&s); got != tc.text {
			t.Errorf("Text after %q = %q, want %q", tc.in, got, tc.text)
		}
	}
	var s sized
	if err := c.SetJSON(&s, []byte(`"auto"`)); err != nil || s.Cache != conf.SizeAuto || c.JSON(&s) != "auto" {
		t.Fatalf(`SetJSON("auto") = %d, %v; JSON %v`, s.Cache, err, c.JSON(&s))
	}
	if err := c.Set(&s, "lots"); err == nil || !strings.Contains(err.Error(), "auto, or off") {
		t.Fatalf("Set(cache, lots) = %v, want an error naming auto and off", err)
	}
	for _, in := range []string{"auto", "off"} {
		if err := p.Set(&s, in); err == nil {
			t.Fatalf("Set(plain, %q) accepted a size without size:\"auto\"", in)
		}
	}
}
