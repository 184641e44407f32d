package stores

import (
	"context"
	"reflect"
	"strings"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/conf"
)

// Settings are every store's settings, by store, each holding its defaults
// until set; the URL picks which apply. In the proxy's configuration they are
// sections (conf.Sections): a store's settings are named with its name in
// front (redis_prefix). A copy shares its stores' settings with the
// original: make another with Clone or DefaultSettings.
type Settings struct {
	byName map[string]cache.Settings
}

// DefaultSettings are every store's defaults.
func DefaultSettings() Settings {
	var s Settings
	for _, k := range Drivers {
		s.Of(k.Name)
	}
	return s
}

// Clone returns a copy of s that shares nothing with it.
func (s Settings) Clone() Settings {
	c := Settings{byName: make(map[string]cache.Settings, len(s.byName))}
	for name, st := range s.byName {
		v := reflect.New(reflect.TypeOf(st).Elem())
		v.Elem().Set(reflect.ValueOf(st).Elem())
		c.byName[name] = v.Interface().(cache.Settings)
	}
	return c
}

// Of returns the settings of the store named name (a pointer to its settings
// struct), made with their defaults when missing; nil when no store has that
// name.
func (s *Settings) Of(name string) cache.Settings {
	if st, ok := s.byName[name]; ok {
		return st
	}
	k, ok := Lookup(name)
	if !ok {
		return nil
	}
	if s.byName == nil {
		s.byName = map[string]cache.Settings{}
	}
	st := k.Settings()
	s.byName[name] = st
	return st
}

// Sections implements conf.Sections: each store's settings, in the order of
// Drivers, prefixed with its name, and needing the setting store to select it
// (needs:"store=redis": a setting of another store is refused,
// conf.CheckNeeds).
func (*Settings) Sections() []conf.Section {
	out := make([]conf.Section, 0, len(Drivers))
	for _, k := range Drivers {
		out = append(out, conf.Section{Prefix: k.Name + "_", Type: reflect.TypeOf(k.Settings()).Elem(),
			Tag: reflect.StructTag(`needs:"store=` + k.Name + `"`)})
	}
	return out
}

// Section implements conf.Sections.
func (s *Settings) Section(prefix string) any { return s.Of(strings.TrimSuffix(prefix, "_")) }

// Fields are the settings of a store, named as in its Caddy module (prefix).
func Fields(st cache.Settings) []conf.Field { return conf.Fields(reflect.TypeOf(st).Elem()) }

// Validate checks the settings the URL selects, without opening anything.
func (s *Settings) Validate(rawURL string) error {
	k, err := Select(rawURL)
	if err != nil {
		return err
	}
	return s.Of(k.Name).Validate(rawURL)
}

// Open opens the store the URL selects, with its settings. A store that does
// not answer at once is an error (the proxy refuses to start against an
// unreachable Redis), unless env.StartUnreachable and the store can start so.
func (s *Settings) Open(ctx context.Context, rawURL string, env Env) (*Opened, error) {
	k, err := Select(rawURL)
	if err != nil {
		return nil, err
	}
	return Open(ctx, k, s.Of(k.Name), rawURL, env)
}

// SchemaSetting reports whether the setting name of st is one its schema
// reads (tagged schema:"", cache.SchemaSettings): idemproxy migrate takes it.
func SchemaSetting(st cache.Settings, name string) bool {
	t := reflect.TypeOf(st).Elem()
	for i := range t.NumField() {
		sf := t.Field(i)
		json, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if _, ok := sf.Tag.Lookup("schema"); ok && json == name {
			return true
		}
	}
	return false
}
