package main

import (
	"cmp"
	"fmt"
	"reflect"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemproxy/idemproxy/caddymodule"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/internal/trivialstore"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/proxy"
)

// The two roots every setting is reached from: the proxy's configuration and
// the Caddy handler's JSON (with the store modules its store member loads: one
// for each store of internal/stores.Drivers).
// Nothing else is listed here: a setting added to a struct they reach gets
// its row.
var (
	proxyType    = reflect.TypeFor[proxy.Config]()
	handlerType  = reflect.TypeFor[caddymodule.Handler]()
	settingsType = reflect.TypeFor[middleware.Settings]() // the Go column's own fields
	trivialType  = reflect.TypeFor[trivialstore.Settings]()
)

// model is what the tables are made of.
type model struct {
	root string // the module's root directory

	proxy    []conf.Field // the proxy's settings: flags, variables, file keys
	proxyDef proxy.Config
	core     []conf.Field // the Caddy handler's settings: the core's, on every surface
	isCore   map[string]bool
	names    map[string]bool // every setting's name, shown as code

	members []member      // the Caddy handler's own JSON members (store, scope)
	modules []storeModule // the modules of its store member, by name
	coreGo  []goField     // Go-only fields reached from the handler (the core's)
	proxyGo []goField     // Go-only fields reached from the proxy's configuration only

	docs    map[string]string // package path → directory, for doc comments
	phrases map[string]string // conf.HelpKey → a setting's help, from its doc comment (help)
	stated  map[string]string // conf.HelpKey → the default its doc comment states
	err     error             // the first error of a cell (fail)
	linkErr error             // the first bad link of the text being rendered
}

// fail records err, unless an error came first.
func (m *model) fail(err error) { m.err = cmp.Or(m.err, err) }

// member is a JSON member of the Caddy handler that is not a core setting.
type member struct {
	name      string
	field     reflect.StructField
	namespace string // the Caddy module namespace it loads from, if any
}

// storeModule is a Caddy store guest module: its name (memory), the JSON
// members that say where its store is (url, table) and its settings, as its
// store describes them (cache.Driver).
type storeModule struct {
	name     string
	locators []string
	fields   []conf.Field
}

// goField is a field a Go user sets that no other surface has: json:"-".
type goField struct {
	owner reflect.Type
	field reflect.StructField
}

func newModel(root string) (*model, error) {
	m := &model{root: root, proxyDef: proxy.DefaultConfig(), isCore: map[string]bool{}, names: map[string]bool{},
		docs: map[string]string{}, phrases: map[string]string{}, stated: map[string]string{}}
	m.proxy, m.core = conf.FieldsWith(proxyType, m.help), conf.FieldsWith(handlerType, m.help)
	conf.FieldsWith(trivialType, m.help) // a store of the tests, whose --help they read
	if m.err != nil {
		return nil, m.err
	}
	for _, f := range m.core {
		m.isCore[f.Name] = true
		m.names[f.Name] = true
		if _, ok := conf.Lookup(m.proxy, f.Name); !ok {
			return nil, fmt.Errorf("core setting %s is not a setting of the proxy, whose defaults the table shows", f.Name)
		}
	}
	for _, f := range m.proxy {
		m.names[f.Name] = true
	}
	for i := range handlerType.NumField() {
		sf := handlerType.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if sf.Anonymous || !sf.IsExported() || name == "" || name == "-" {
			continue
		}
		mb := member{name: name, field: sf}
		for _, opt := range strings.Fields(sf.Tag.Get("caddy")) {
			if ns, ok := strings.CutPrefix(opt, "namespace="); ok {
				mb.namespace = ns
				sms, err := m.storeModules(ns)
				if err != nil {
					return nil, err
				}
				m.modules = append(m.modules, sms...)
			}
		}
		m.members = append(m.members, mb)
	}
	if len(m.modules) == 0 {
		return nil, fmt.Errorf("no Caddy store modules found from the handler's JSON")
	}
	seen := map[string]bool{}
	for _, g := range goFields(handlerType) {
		m.coreGo = append(m.coreGo, g)
		seen[g.owner.String()+"."+g.field.Name] = true
	}
	for _, g := range goFields(proxyType) {
		if !seen[g.owner.String()+"."+g.field.Name] {
			m.proxyGo = append(m.proxyGo, g)
		}
	}
	return m, nil
}

// storeModules returns the Caddy store modules of namespace ns: one for each store
// of the registry (internal/stores.Drivers), which describes it (its name, its
// locator, its settings); each must be registered in ns.
func (m *model) storeModules(ns string) ([]storeModule, error) {
	var out []storeModule
	for _, k := range stores.Drivers {
		if _, err := caddy.GetModule(ns + "." + k.Name); err != nil {
			return nil, fmt.Errorf("the %s store has no Caddy module: %w", k.Name, err)
		}
		sm := storeModule{name: k.Name, fields: conf.FieldsWith(reflect.TypeOf(k.Settings()).Elem(), m.help)}
		if k.Locator != "" {
			sm.locators = []string{k.Locator}
		}
		out = append(out, sm)
	}
	return out, nil
}

// goFields walks t as conf.Fields does (anonymous structs, prefixed structs,
// sections) and returns the exported fields tagged json:"-": a Go user's only.
func goFields(t reflect.Type) []goField {
	var out []goField
	for i := range t.NumField() {
		sf := t.Field(i)
		_, prefixed := strings.CutPrefix(sf.Tag.Get("conf"), "prefix=")
		sections, isSections := reflect.New(sf.Type).Interface().(conf.Sections)
		switch {
		case isSections:
			for _, sec := range sections.Sections() {
				out = append(out, goFields(sec.Type)...)
			}
		case sf.Type.Kind() == reflect.Struct && (sf.Anonymous || prefixed):
			out = append(out, goFields(sf.Type)...)
		case sf.IsExported() && sf.Tag.Get("json") == "-":
			out = append(out, goField{owner: t, field: sf})
		}
	}
	return out
}

// moduleOf returns the store module that has the setting f (the same field of
// the same struct type), and that setting.
func (m *model) moduleOf(f conf.Field) (storeModule, conf.Field, bool) {
	for _, sm := range m.modules {
		for _, g := range sm.fields {
			if g.Owner == f.Owner && g.StructField.Name == f.StructField.Name {
				return sm, g, true
			}
		}
	}
	return storeModule{}, conf.Field{}, false
}
