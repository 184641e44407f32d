package conf_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// redisOnly's settings apply to a Redis store only (a needs tag on the prefixed
// struct field reaches every setting inside).
type redisOnly struct {
	Prefix string   `json:"prefix" help:"key prefix"`
	Lists  []string `json:"lists" help:"a list"`
}

type featured struct {
	Hook      string    `json:"hook" help:"the feature"`
	Secret    string    `json:"hook_secret" needs:"hook" help:"needs hook set"`
	Tolerance int       `json:"hook_tolerance" needs:"hook" help:"needs hook set"`
	On        bool      `json:"on" help:"a boolean feature"`
	Level     int       `json:"level" needs:"on" help:"needs on"`
	Store     string    `json:"store" help:"the store's URL"`
	Redis     redisOnly `conf:"prefix=redis_" needs:"store=redis"`
}

// CheckNeeds refuses a setting that differs from its default while the
// feature it needs is off, names it, and leaves alone one at its default (an
// empty list is its default nil) or one whose feature is on.
func TestCheckNeeds(t *testing.T) {
	fields := conf.Fields(reflect.TypeFor[featured]())
	def := featured{Tolerance: 5, Store: "memory"}
	cases := []struct {
		name string
		set  func(*featured)
		want *conf.NeedsError // nil: accepted
		text string
	}{
		{"defaults", func(*featured) {}, nil, ""},
		{"secret without hook", func(c *featured) { c.Secret = "env:X" },
			&conf.NeedsError{Field: "hook_secret", Feature: "hook"}, "applies when hook is set, and it is not"},
		{"secret with hook", func(c *featured) { c.Hook, c.Secret = "stripe", "env:X" }, nil, ""},
		{"tolerance at its default", func(c *featured) { c.Tolerance = 5 }, nil, ""},
		{"tolerance changed", func(c *featured) { c.Tolerance = 6 }, &conf.NeedsError{Field: "hook_tolerance", Feature: "hook"}, ""},
		{"level without on", func(c *featured) { c.Level = 2 }, &conf.NeedsError{Field: "level", Feature: "on", Got: "false"}, ""},
		{"level with on", func(c *featured) { c.On, c.Level = true, 2 }, nil, ""},
		{"redis prefix on memory", func(c *featured) { c.Redis.Prefix = "x:" },
			&conf.NeedsError{Field: "redis_prefix", Feature: "store", Want: "redis", Got: "memory"}, "applies to a redis store; store is memory"},
		{"redis prefix on redis", func(c *featured) { c.Store, c.Redis.Prefix = "redis", "x:" }, nil, ""},
		{"empty list is no list", func(c *featured) { c.Redis.Lists = []string{} }, nil, ""},
	}
	for _, c := range cases {
		got := def
		c.set(&got)
		err := conf.CheckNeeds(fields, &got, &def, nil)
		var ne *conf.NeedsError
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v, want none", c.name, err)
		case c.want != nil && !errors.As(err, &ne):
			t.Errorf("%s: %v, want a *NeedsError", c.name, err)
		case c.want != nil && *ne != *c.want:
			t.Errorf("%s: %+v, want %+v", c.name, *ne, *c.want)
		case c.text != "" && err.Error() != c.text:
			t.Errorf("%s: %q, want %q", c.name, err, c.text)
		}
	}
	// The feature's value may come from the caller (a store URL's kind).
	got := def
	got.Store, got.Redis.Prefix = "redis://h:6379", "x:"
	if err := conf.CheckNeeds(fields, &got, &def, nil); err == nil {
		t.Fatal("a URL is not the kind without the caller's help")
	}
	err := conf.CheckNeeds(fields, &got, &def, func(feature string) (string, bool) {
		return "redis", feature == "store"
	})
	if err != nil {
		t.Fatalf("with the kind from the caller: %v", err)
	}
}
