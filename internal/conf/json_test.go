package conf_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/conf"
)

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
