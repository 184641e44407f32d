package conf_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// A ${name} in a help tag is the struct's list, wherever the struct is
// embedded; a name the struct does not list, or a list in a struct without
// HelpList, is a programming error Fields panics on.
func TestHelpNamesAList(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[listed](), reflect.TypeFor[outer]()} {
		fields := conf.Fields(typ)
		f, _ := conf.Lookup(fields, "kind")
		if f.Help != "one of a, b or c; {braces} stay" {
			t.Errorf("%v: help %q", typ, f.Help)
		}
		if f, _ := conf.Lookup(fields, "plain"); f.Help != "no list" {
			t.Errorf("%v: help %q", typ, f.Help)
		}
	}
	type unknown struct {
		listed
		X string `json:"x" help:"${nope}"`
	}
	type noLister struct {
		X string `json:"x" help:"${kinds}"`
	}
	for typ, want := range map[reflect.Type]string{
		reflect.TypeFor[unknown]():  "setting x: conf_test.unknown lists no ${nope}",
		reflect.TypeFor[noLister](): "setting x: help names ${kinds}, and conf_test.noLister has no HelpList",
	} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, want) {
					t.Errorf("Fields(%v) panicked with %q, want %q", typ, msg, want)
				}
			}()
			conf.Fields(typ)
		}()
	}
}

func TestOrList(t *testing.T) {
	for _, c := range []struct {
		items []string
		want  string
	}{
		{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b"}, "a or b"}, {[]string{"a", "b", "c"}, "a, b or c"},
	} {
		if got := conf.OrList(c.items); got != c.want {
			t.Errorf("OrList(%q) = %q, want %q", c.items, got, c.want)
		}
	}
}

// listed names its values in its help, as a settings struct over a registry
// does.
type listed struct {
	Kind  string `json:"kind" help:"one of ${kinds}; {braces} stay"`
	Plain string `json:"plain" help:"no list"`
}

func (listed) HelpList(name string) (string, bool) {
	if name == "kinds" {
		return conf.OrList([]string{"a", "b", "c"}), true
	}
	return "", false
}

// embedding promotes HelpList: the help of the embedded settings is filled too.
type outer struct {
	Own string `json:"own" help:"own"`
	listed
}
