package caddymodule

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
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
// `redis <url> [{ prefix <prefix> … }]` and `postgres <url> [{ table <name> … }]`;
// a redis:// (rediss://, redis+cluster://, redis+sentinel://) or postgres://
// (postgresql://) URL alone selects its store. Every field of
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
			f, ok := conf.Lookup(middleware.ConfigFields(), name)
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
		return d.Errf("unknown store %q: want memory, redis <url>, postgres <url>, or a redis:// or postgres:// URL", d.Val())
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

// storeOptions reads a store's block of `<option> [<value>]` lines, handing each
// to set ("" when the option has no value).
func storeOptions(d *caddyfile.Dispenser, set func(opt, v string) error) error {
	for d.NextBlock(0) {
		opt := d.Val()
		var v string
		if d.NextArg() {
			v = d.Val()
		}
		if d.NextArg() {
			return d.Errf("%s: takes one value", opt)
		}
		if err := set(opt, v); err != nil {
			return err
		}
	}
	return nil
}

// Interface guards.
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*MemoryStore)(nil)
	_ caddyfile.Unmarshaler = (*RedisStore)(nil)
	_ caddyfile.Unmarshaler = (*PostgresStore)(nil)
)

// UnmarshalCaddyfile reads `postgres <url> [{ table <name>; create_schema
// [true|false]; sweep_interval <duration> }]`, or `<url> [{ … }]`.
func (ps *PostgresStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "postgres", or the URL itself
	ps.URL = d.Val()
	if ps.URL == "postgres" {
		if !d.NextArg() {
			return d.Errf("store postgres: missing the PostgreSQL URL")
		}
		ps.URL = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	return storeOptions(d, func(opt, v string) error {
		switch opt {
		case "table":
			if err := pgstore.CheckTable(v); err != nil {
				return d.Errf("table: %v", err)
			}
			ps.Table = v
		case "create_schema":
			on := v == "" || v == "true"
			if !on && v != "false" {
				return d.Errf("create_schema: want true or false; got %q", v)
			}
			ps.CreateSchema = &on
		case "sweep_interval":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur < 0 {
				return d.Errf("sweep_interval: want a duration, 0 to turn the sweeper off; got %q", v)
			}
			cd := caddy.Duration(dur)
			ps.SweepInterval = &cd
		default:
			return d.Errf("unknown postgres store option %q", opt)
		}
		return nil
	})
}

// UnmarshalCaddyfile reads `memory [{ max_records <n>; max_bytes <size> }]`.
func (ms *MemoryStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "memory"
	if d.NextArg() {
		return d.ArgErr()
	}
	return storeOptions(d, func(opt, v string) error {
		switch opt {
		case "max_records":
			var n int64
			if _, err := fmt.Sscan(v, &n); err != nil || n < 1 || fmt.Sprint(n) != v {
				return d.Errf("max_records: want a whole number of records, at least 1; got %q", v)
			}
			ms.MaxRecords = n
		case "max_bytes":
			if err := ms.MaxBytes.Set(v); err != nil {
				return d.Errf("max_bytes: %v", err)
			}
			if ms.MaxBytes < 1 {
				return d.Errf("max_bytes: must be at least 1B")
			}
		default:
			return d.Errf("unknown memory store option %q", opt)
		}
		return nil
	})
}

// UnmarshalCaddyfile reads `redis <url> [{ prefix <prefix>; allow_eviction;
// wait_replicas <n>; wait_timeout <duration> }]`, or `<url> [{ … }]`.
func (rs *RedisStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "redis", or the URL itself
	rs.URL = d.Val()
	if rs.URL == "redis" {
		if !d.NextArg() {
			return d.Errf("store redis: missing the Redis URL")
		}
		rs.URL = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	return storeOptions(d, func(opt, v string) error {
		switch opt {
		case "prefix":
			if v == "" {
				return d.Errf("prefix: takes one value")
			}
			rs.Prefix = v
		case "allow_eviction":
			if v != "" {
				return d.Errf("allow_eviction: takes no value")
			}
			rs.AllowEviction = true
		case "wait_replicas":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return d.Errf("wait_replicas: want a whole number of replicas, 0 or more; got %q", v)
			}
			rs.WaitReplicas = n
		case "wait_timeout":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur < time.Millisecond {
				return d.Errf("wait_timeout: want a duration of at least 1ms; got %q", v)
			}
			rs.WaitTimeout = caddy.Duration(dur)
		default:
			return d.Errf("unknown redis store option %q", opt)
		}
		return nil
	})
}
