package proxy_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/proxy"
)

// badValues are values of the wrong type for a setting of each kind: what the
// file says, and the words of the error.
func badValues(f conf.Field) map[string]string {
	bad := map[string]string{
		"{a: b}": "a mapping", // every setting takes a value or a list, never a mapping
	}
	switch {
	case f.Duration():
		bad["2days"] = "not a duration"
		bad["[1h, 2h]"] = "a list"
		bad["-5s"] = "must not be negative"
	case f.Bytes():
		bad["lots"] = "not a size"
		bad["10"] = "has no unit"
		bad["[1MiB]"] = "a list"
	case f.Bool():
		bad["maybe"] = "not a boolean"
		bad["[true]"] = "a list"
	case f.Int():
		bad["many"] = "not a whole number"
		bad["1.5"] = "not a whole number"
		bad["[1]"] = "a list"
	case f.List():
		bad["[[a]]"] = "item 0 is not a value"
		bad["[{a: b}]"] = "item 0 is not a value"
	default: // a string
		bad["[a, b]"] = "a list"
	}
	bad["~"] = "no value"
	return bad
}

// A value of the wrong type for any setting of the config file, at the top
// level or in a route, is an error naming the file, the line of the value and
// the key: every setting, every kind (duration, size, boolean, whole number,
// list, string), every wrong shape (a mapping, a list, a null).
func TestConfigFileTypeErrorsNameTheKeyAndLine(t *testing.T) {
	top := conf.Fields(reflect.TypeFor[proxy.Config]())
	route := conf.Fields(reflect.TypeFor[config.Config]())
	n := 0
	check := func(t *testing.T, file, key, want string, line int) {
		t.Helper()
		path := testutil.TempFile(t, "c.yaml", file)
		_, err := proxy.ParseArgs([]string{"--config", path}, env(nil), &bytes.Buffer{})
		n++
		if err == nil {
			t.Errorf("%q: no error", file)
			return
		}
		msg := err.Error()
		for _, w := range []string{path, fmt.Sprintf("line %d", line), key, want} {
			if !strings.Contains(msg, w) {
				t.Errorf("%q: error %q does not name %q", file, msg, w)
			}
		}
	}
	for _, f := range top {
		first := "upstream: http://127.0.0.1:1\n"
		if f.Name == "upstream" {
			first = "listen: 127.0.0.1:8080\n"
		}
		for value, want := range badValues(f) {
			check(t, first+"# a comment\n"+f.Name+": "+value+"\n", f.Name, want, 3)
		}
	}
	for _, f := range route {
		for value, want := range badValues(f) {
			check(t, "upstream: http://127.0.0.1:1\nroutes:\n  - path: /a\n  - path: /b\n    "+f.Name+": "+value+"\n", "routes[1]: "+f.Name, want, 5)
		}
	}
	if n < 3*len(top) {
		t.Fatalf("only %d files tried for %d settings", n, len(top))
	}
}

// A value of the right type that a setting refuses names the key and its line
// too, in a route as at the top level, and so does a bad route path.
func TestConfigFileValueErrorsNameTheKeyAndLine(t *testing.T) {
	for _, c := range []struct {
		file string
		line int
		want string
	}{
		{"lock_ttl: 1ms\n", 2, "lock_ttl"},
		{"methods: [post]\n", 2, "methods"},
		{"store_statuses: [700]\n", 2, "store_statuses"},
		{"listen: \"8080\"\n", 2, "listen"},
		{"routes:\n  - path: /a\n    lock_ttl: 1ms\n", 4, "routes[0] (/a): lock_ttl: must be at least 3ms"},
		{"routes:\n  - path: /a\n    methods: [post]\n", 4, "routes[0] (/a): methods"},
		{"routes:\n  - path: /a\n  - path: /b\n\n    methods: [POST]\n    wait: 5s\n    in_flight_only: true\n", 7, "routes[1] (/b): wait"},
		{"wait: 5s\nroutes:\n  - path: /a\n    in_flight_only: true\n", 4, "routes[0] (/a): wait: does not combine with in_flight_only"},
		{"wait: 5s\nroutes:\n  - path: /a\n    in_flight_only: true\n", 2, "the route inherits wait in "},
		{"routes:\n  - path: nope\n", 3, "routes[0]: path \"nope\" must start with /"},
		{"routes:\n  - path: /a\n  - path: /A\n", 4, "routes[1]: path \"/A\" appears twice"},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		path = testutil.TempFile(t, filepath.Base(path), "upstream: http://127.0.0.1:1\n"+c.file)
		_, err := proxy.ParseArgs([]string{"--config", path}, env(nil), &bytes.Buffer{})
		if err == nil {
			t.Errorf("%q: no error", c.file)
			continue
		}
		for _, w := range []string{path, fmt.Sprintf("line %d", c.line), c.want} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not name %q", c.file, err, w)
			}
		}
	}
}
