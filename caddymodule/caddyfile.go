package caddymodule

import (
	"reflect"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemproxy/idemproxy/cache/dynamostore"
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
//	    <setting> <value...>
//	}
//
// Store modules: `memory [{ max_records <n>; max_bytes <size> }]`,
// `redis <url> [{ prefix <prefix> … }]`, `postgres <url> [{ table <name> … }]`
// and `dynamodb <table> [{ create_table false … }]`; a redis:// (rediss://,
// redis+cluster://, redis+sentinel://), postgres:// (postgresql://) or
// dynamodb://TABLE URL alone selects its store. Every field of
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
		return d.Errf("unknown store %q: want memory, redis <url>, postgres <url>, dynamodb <table>, or a redis://, postgres:// or dynamodb:// URL", d.Val())
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

// coreFields are the core's settings: the handler's subdirectives.
var coreFields = conf.Fields(reflect.TypeFor[config.Config]())

// storeNames are the stores' names in messages.
var storeNames = map[string]string{"memory": "memory", "redis": "Redis", "postgres": "PostgreSQL", "dynamodb": "DynamoDB"}

// unmarshalStore reads a store's Caddyfile tokens: `<kind> [<locator>] [{ … }]`,
// or `<url> [{ … }]` (when loc is not nil), with a block of `<setting>
// [<value>…]` lines named as the store's settings (internal/stores). The
// locator is a URL, or DynamoDB's table (storeLocators).
func unmarshalStore(d *caddyfile.Dispenser, kind string, settings any, loc *string) error {
	d.Next() // the kind, or the URL itself
	if loc != nil {
		*loc = d.Val()
		if *loc == kind {
			if !d.NextArg() {
				what := "URL"
				if storeLocators[kind] == "table" {
					what = "table"
				}
				return d.Errf("store %s: missing the %s %s", kind, storeNames[kind], what)
			}
			*loc = d.Val()
		}
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		f, ok := conf.Lookup(storeFields[kind], name)
		if !ok {
			return d.Errf("unknown %s store option %q", kind, name)
		}
		args := d.RemainingArgs()
		if !f.List() && (len(args) > 1 || len(args) == 0 && !f.Bool()) {
			return d.Errf("%s: takes one value", name)
		}
		if err := f.Set(settings, args...); err != nil {
			return d.Errf("%s: %v", name, err)
		}
	}
	return nil
}

// UnmarshalCaddyfile reads `memory [{ max_records <n>; max_bytes <size> }]`.
func (ms *MemoryStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return unmarshalChecked(d, "memory", &ms.Memory, nil, func() error { return ms.Memory.Validate() })
}

// UnmarshalCaddyfile reads `redis <url> [{ prefix <prefix>; allow_eviction;
// wait_replicas <n>; wait_timeout <duration> }]`, or `<url> [{ … }]`.
func (rs *RedisStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return unmarshalChecked(d, "redis", &rs.Redis, &rs.URL, func() error { return rs.Redis.Check() })
}

// UnmarshalCaddyfile reads `postgres <url> [{ table <name>; create_schema
// [true|false]; sweep_interval <duration> }]`, or `<url> [{ … }]`.
func (ps *PostgresStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return unmarshalChecked(d, "postgres", &ps.Postgres, &ps.URL, func() error { return ps.Postgres.Check() })
}

// unmarshalChecked is unmarshalStore, then check of the settings read (the URL,
// which may hold placeholders, is checked at provisioning).
func unmarshalChecked(d *caddyfile.Dispenser, kind string, settings any, url *string, check func() error) error {
	if err := unmarshalStore(d, kind, settings, url); err != nil {
		return err
	}
	if err := check(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// UnmarshalCaddyfile reads `dynamodb <table> [{ create_table [true|false];
// inline_limit <size>; max_response <size> }]`, or `dynamodb://<table> [{ … }]`.
// A table without placeholders is checked here.
func (ds *DynamoDBStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := unmarshalStore(d, "dynamodb", &ds.DynamoDB, &ds.Table); err != nil {
		return err
	}
	if strings.Contains(ds.Table, "://") {
		table, err := stores.DynamoDBTable(ds.Table)
		if err != nil {
			return d.Errf("store dynamodb: %v", err)
		}
		ds.Table = table
	} else if !strings.Contains(ds.Table, "{") {
		if err := dynamostore.CheckTable(ds.Table); err != nil {
			return d.Errf("store dynamodb: %v", err)
		}
	}
	if err := ds.DynamoDB.Check(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// Interface guards.
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*MemoryStore)(nil)
	_ caddyfile.Unmarshaler = (*RedisStore)(nil)
	_ caddyfile.Unmarshaler = (*PostgresStore)(nil)
	_ caddyfile.Unmarshaler = (*DynamoDBStore)(nil)
)
