package caddymodule

import (
	"reflect"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("idempotency", parseCaddyfile)
	// After authentication and encode (so stored bodies are uncompressed and encode
	// compresses replays per client), before reverse_proxy and other responders.
	httpcaddyfile.RegisterDirectiveOrder("idempotency", httpcaddyfile.After, "encode")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	idempotency [<matcher>] {
//	    store <module> [<args…>] [{ <module options> }]
//	    store <url>
//	    scope <placeholder...>
//	    start_unreachable [true|false]
//	    name <name>
//	    <setting> <value...>
//	}
//
// Store modules (one per store, Store.UnmarshalCaddyfile): `memory [{
// max_records <n>; max_bytes <size> }]`, `redis <url> [{ prefix <prefix> …
// }]`, `postgres <url> [{ table <name> … }]`, `dynamodb <table> [{
// create_table false … }]`; a store's URL alone (redis://…, dynamodb://TABLE)
// selects its store. Every field of
// middleware.Config is a setting, by its JSON name: a boolean takes no value (true)
// or true/false, a list takes its items, every other setting one value.
func (m *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] {
			return d.Errf("duplicate subdirective %q", name)
		}
		seen[name] = true
		switch name {
		case "store":
			if err := m.parseStore(d); err != nil {
				return err
			}
		case "scope":
			if m.Scope = d.RemainingArgs(); len(m.Scope) == 0 {
				return d.ArgErr()
			}
		case "name":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if m.Name = d.Val(); d.NextArg() {
				return d.ArgErr()
			}
		case "start_unreachable":
			switch args := d.RemainingArgs(); {
			case len(args) == 0:
				m.StartUnreachable = true
			case len(args) == 1 && (args[0] == "true" || args[0] == "false"):
				m.StartUnreachable = args[0] == "true"
			default:
				return d.Errf("start_unreachable: want no value, true or false")
			}
		default:
			f, ok := conf.Lookup(coreFields, name)
			if !ok {
				return d.Errf("unknown subdirective %q", name)
			}
			args := d.RemainingArgs()
			if !f.List() && (len(args) > 1 || len(args) == 0 && !f.Bool()) {
				return d.ArgErr()
			}
			if d.NextBlock(d.Nesting()) {
				return d.Errf("%s: takes no block", name)
			}
			if err := f.Set(&m.Config, args...); err != nil {
				return d.Errf("%s: %v", name, err)
			}
		}
	}
	return nil
}

// parseStore hands `store <module> …` (or `store <url>`) to the store module,
// which parses its own arguments and block.
func (m *Handler) parseStore(d *caddyfile.Dispenser) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	name := d.Val()
	if strings.Contains(name, "://") {
		kind, err := stores.KindOf(name)
		if err != nil {
			return d.Errf("store: %v", err)
		}
		name = kind
	}
	modID := "http.handlers.idempotency.stores." + name
	if _, err := caddy.GetModule(modID); err != nil {
		return d.Errf("unknown store %q: want %s", d.Val(), storeForms())
	}
	unm, err := caddyfile.UnmarshalModule(d, modID)
	if err != nil {
		return err
	}
	var warnings []caddyconfig.Warning
	m.StoreRaw = caddyconfig.JSONModuleObject(unm, "type", name, &warnings)
	if len(warnings) > 0 {
		return d.Errf("store %s: %s", name, warnings[0].Message)
	}
	return nil
}

// storeForms are the forms of `store`, for errors: memory, redis <url>, …, or
// a redis:// … URL.
func storeForms() string {
	var forms, urls []string
	for _, k := range stores.Drivers {
		if k.Locator == "" {
			forms = append(forms, k.Name)
			continue
		}
		forms = append(forms, k.Name+" <"+k.Locator+">")
		urls = append(urls, k.Schemes[0]+"://")
	}
	return strings.Join(forms, ", ") + ", or a " + conf.OrList(urls) + " URL"
}

// ownSubdirectives are the handler's subdirectives that are not the core's
// settings, with the form of their arguments, in the order docs/caddy.md's
// syntax block lists them (TestCaddyfileSyntaxBlock).
var ownSubdirectives = []struct{ name, args string }{
	{"store", "<store> [<locator>] [{ <store options> }]"},
	{"scope", "<placeholders…>"},
	{"name", "<name>"},
	{"start_unreachable", "[true|false]"},
}

// coreFields are the core's settings: the handler's subdirectives.
var coreFields = conf.Fields(reflect.TypeFor[config.Config]())

// UnmarshalCaddyfile reads a store's Caddyfile tokens: `<name> [<locator>] [{
// … }]`, or `<url> [{ … }]`, with a block of `<setting> [<value>…]` lines
// named as the store's settings (memory { max_records <n> }, redis <url> {
// prefix <prefix> }, dynamodb <table> { create_table false }, …). The
// settings are checked here; so is a locator that is no URL (DynamoDB's
// table) and has no placeholders. A URL is checked at provisioning.
func (s *Store) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	k := s.kind
	d.Next() // the store's name, or its URL
	if k.Locator != "" {
		loc := d.Val()
		if loc == k.Name {
			if !d.NextArg() {
				what := k.Locator
				if what == "url" {
					what = "URL"
				}
				return d.Errf("store %s: missing the %s %s", k.Name, k.Title, what)
			}
			loc = d.Val()
		}
		s.Location = loc
		if k.Locator != "url" && strings.Contains(loc, "://") { // dynamodb://TABLE: the table
			if err := s.Settings.Validate(loc); err != nil {
				return d.Errf("store %s: %v", k.Name, err)
			}
			_, s.Location, _ = strings.Cut(loc, "://")
		}
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		f, ok := conf.Lookup(stores.Fields(s.Settings), name)
		if !ok {
			return d.Errf("unknown %s store option %q", k.Name, name)
		}
		args := d.RemainingArgs()
		if !f.List() && (len(args) > 1 || len(args) == 0 && !f.Bool()) {
			return d.Errf("%s: takes one value", name)
		}
		if err := f.Set(s.Settings, args...); err != nil {
			return d.Errf("%s: %v", name, err)
		}
	}
	if k.Locator != "" && k.Locator != "url" && !strings.Contains(s.Location, "{") {
		if err := s.Settings.Validate(s.url()); err != nil {
			return d.Errf("store %s: %v", k.Name, err)
		}
		return nil
	}
	if err := s.Settings.Check(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// Interface guards.
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*Store)(nil)
)
