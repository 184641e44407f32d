package caddymodule

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
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
//	    store memory [{ max_records <n>; max_bytes <size> }]
//	    store redis <url> [{ prefix <prefix> }]
//	    store <redis-url>
//	    ttl <duration>
//	    lock_ttl <duration>
//	    methods <method...>
//	    require_key
//	    header <name>
//	    scope <placeholder...>
//	    fingerprint_headers <name...>
//	    max_request_body <size>
//	    max_body <size>
//	    store_statuses <spec...>
//	    ignore_headers <name...>
//	    fail_open
//	    handler_timeout <duration>
//	    wait <duration>
//	    in_flight_only
//	}
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
		var err error
		switch name {
		case "store":
			err = m.parseStore(d)
		case "ttl":
			err = parseDuration(d, &m.TTL)
		case "lock_ttl":
			err = parseDuration(d, &m.LockTTL)
		case "handler_timeout":
			err = parseDuration(d, &m.HandlerTimeout)
		case "wait":
			err = parseDuration(d, &m.Wait)
		case "in_flight_only":
			err = parseFlag(d, &m.InFlightOnly)
		case "methods":
			m.Methods, err = parseList(d)
			for i, v := range m.Methods {
				m.Methods[i] = strings.ToUpper(v)
			}
		case "require_key":
			err = parseFlag(d, &m.RequireKey)
		case "fail_open":
			err = parseFlag(d, &m.FailOpen)
		case "header":
			err = parseOne(d, &m.Header)
		case "scope":
			m.Scope, err = parseList(d)
		case "fingerprint_headers":
			m.FingerprintHeaders, err = parseList(d)
		case "max_request_body":
			err = parseSize(d, &m.MaxRequestBody)
		case "max_body":
			err = parseSize(d, &m.MaxBody)
		case "store_statuses":
			m.StoreStatuses, err = parseList(d)
		case "ignore_headers":
			m.IgnoreHeaders, err = parseList(d)
		default:
			return d.Errf("unknown subdirective %q", name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (m *Handler) parseStore(d *caddyfile.Dispenser) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	kind := d.Val()
	var mod caddy.Module
	switch {
	case kind == "memory":
		ms := new(MemoryStore)
		if d.NextArg() {
			return d.ArgErr()
		}
		for nesting := d.Nesting(); d.NextBlock(nesting); {
			var err error
			switch d.Val() {
			case "max_records":
				var v string
				if err = parseOne(d, &v); err == nil {
					n, perr := strconv.ParseInt(v, 10, 64)
					if perr != nil || n < 1 {
						return d.Errf("max_records: want a whole number of records, at least 1; got %q", v)
					}
					ms.MaxRecords = n
				}
			case "max_bytes":
				if err = parseSize(d, &ms.MaxBytes); err == nil && ms.MaxBytes < 1 {
					return d.Errf("max_bytes: must be at least 1 byte")
				}
			default:
				return d.Errf("unknown memory store option %q", d.Val())
			}
			if err != nil {
				return err
			}
		}
		mod = ms
	case kind == "redis" || strings.HasPrefix(kind, "redis://") || strings.HasPrefix(kind, "rediss://") ||
		strings.HasPrefix(kind, "redis+") || strings.HasPrefix(kind, "rediss+"):
		rs := new(RedisStore)
		if kind == "redis" {
			if !d.NextArg() {
				return d.Errf("store redis: missing the Redis URL")
			}
			rs.URL = d.Val()
		} else {
			rs.URL = kind
		}
		if d.NextArg() {
			return d.ArgErr()
		}
		for nesting := d.Nesting(); d.NextBlock(nesting); {
			switch d.Val() {
			case "prefix":
				if err := parseOne(d, &rs.Prefix); err != nil {
					return err
				}
			default:
				return d.Errf("unknown redis store option %q", d.Val())
			}
		}
		mod = rs
	default:
		return d.Errf("unknown store %q: want memory, redis <url>, or a redis:// URL", kind)
	}
	var warnings []caddyconfig.Warning
	m.StoreRaw = caddyconfig.JSONModuleObject(mod, "type", mod.CaddyModule().ID.Name(), &warnings)
	return nil
}

func parseOne(d *caddyfile.Dispenser, into *string) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	*into = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

func parseList(d *caddyfile.Dispenser) ([]string, error) {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return nil, d.ArgErr()
	}
	return args, nil
}

func parseFlag(d *caddyfile.Dispenser, into *bool) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	*into = true
	return nil
}

func parseDuration(d *caddyfile.Dispenser, into *caddy.Duration) error {
	name := d.Val()
	var s string
	if err := parseOne(d, &s); err != nil {
		return err
	}
	v, err := caddy.ParseDuration(s)
	if err != nil {
		return d.Errf("%s: bad duration %q: %v", name, s, err)
	}
	if v < 0 {
		return d.Errf("%s: duration must not be negative", name)
	}
	*into = caddy.Duration(v)
	return nil
}

func parseSize(d *caddyfile.Dispenser, into *int64) error {
	name := d.Val()
	var s string
	if err := parseOne(d, &s); err != nil {
		return err
	}
	v, err := humanize.ParseBytes(s)
	if err != nil || v > 1<<62 {
		return d.Errf("%s: bad size %q", name, s)
	}
	*into = int64(v)
	return nil
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
