package conf_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// plugins are settings kept by prefix, their structs known at run time (as a
// registry of stores keeps them).
type plugins struct{ by map[string]any }

type alpha struct {
	Size int64 `json:"size" unit:"bytes" help:"alpha's size"`
}

type beta struct {
	Wait  time.Duration `json:"wait" help:"beta's wait"`
	Quiet bool          `json:"quiet" reload:"live" help:"beta's quiet"`
}

func (*plugins) Sections() []conf.Section {
	return []conf.Section{{Prefix: "alpha_", Type: reflect.TypeFor[alpha]()},
		{Prefix: "beta_", Type: reflect.TypeFor[beta](), Tag: `needs:"name=beta"`}}
}

func (p *plugins) Section(prefix string) any {
	if p.by == nil {
		p.by = map[string]any{}
	}
	if s, ok := p.by[prefix]; ok {
		return s
	}
	var s any = &alpha{Size: 1 << 10}
	if prefix == "beta_" {
		s = &beta{Wait: time.Second}
	}
	p.by[prefix] = s
	return s
}

type withPlugins struct {
	Name    string `json:"name" help:"the name"`
	Plugins plugins
	Last    int `json:"last" help:"the last"`
}

// A Sections field's settings are its sections', prefixed, in place: each is
// set, read, copied and compared through the section, made with its defaults
// when first reached.
func TestSections(t *testing.T) {
	fields := conf.Fields(reflect.TypeFor[withPlugins]())
	var names []string
	for _, f := range fields {
		names = append(names, f.Name)
	}
	if want := []string{"name", "alpha_size", "beta_wait", "beta_quiet", "last"}; !slices.Equal(names, want) {
		t.Fatalf("fields %q, want %q", names, want)
	}
	size, _ := conf.Lookup(fields, "alpha_size")
	quiet, _ := conf.Lookup(fields, "beta_quiet")
	if quiet.Reload != conf.ReloadLive {
		t.Fatalf("beta_quiet reload %q", quiet.Reload)
	}
	var a, b withPlugins
	if got := size.Text(&a); got != "1KiB" {
		t.Fatalf("alpha_size of a zero value: %q, want its default 1KiB", got)
	}
	if err := size.Set(&a, "2MiB"); err != nil || a.Plugins.Section("alpha_").(*alpha).Size != 2<<20 {
		t.Fatalf("Set: %v, %+v", err, a.Plugins.Section("alpha_"))
	}
	if err := conf.DecodeJSON(fields, &a, map[string]json.RawMessage{"beta_quiet": json.RawMessage("true"), "beta_wait": json.RawMessage(`"5s"`)}, nil); err != nil {
		t.Fatal(err)
	}
	if bs := a.Plugins.Section("beta_").(*beta); !bs.Quiet || bs.Wait != 5*time.Second {
		t.Fatalf("DecodeJSON: %+v", bs)
	}
	if size.Equal(&a, &b) {
		t.Fatal("Equal: 2MiB and the default are equal")
	}
	size.Copy(&b, &a)
	if !size.Equal(&a, &b) || b.Plugins.Section("alpha_").(*alpha).Size != 2<<20 {
		t.Fatal("Copy did not copy through the section")
	}
	if quiet.Equal(&a, &b) {
		t.Fatal("Copy of alpha_size copied beta_quiet")
	}
}

// A section's tags reach its settings as a prefixed struct field's do: a
// section's needs tag is each of its settings' (Field.Needs), and CheckNeeds
// refuses one of them set while the feature it needs is off.
func TestSectionNeeds(t *testing.T) {
	fields := conf.Fields(reflect.TypeFor[withPlugins]())
	for _, name := range []string{"alpha_size", "beta_wait", "beta_quiet"} {
		f, _ := conf.Lookup(fields, name)
		if want := map[bool]string{true: "name=beta"}[name != "alpha_size"]; f.Needs != want {
			t.Errorf("%s needs %q, want %q", name, f.Needs, want)
		}
	}
	var def, got withPlugins
	got.Plugins.Section("beta_").(*beta).Wait = time.Minute
	err := conf.CheckNeeds(fields, &got, &def, nil)
	var ne *conf.NeedsError
	if !errors.As(err, &ne) || *ne != (conf.NeedsError{Field: "beta_wait", Feature: "name", Want: "beta"}) {
		t.Fatalf("beta_wait set with name empty: %v", err)
	}
	got.Name = "beta"
	if err := conf.CheckNeeds(fields, &got, &def, nil); err != nil {
		t.Fatalf("beta_wait set with name beta: %v", err)
	}
}
