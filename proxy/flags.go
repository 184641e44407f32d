package proxy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// flagSpec binds one command-line flag and its IDEMPROXY_* variable to Config.
type flagSpec struct {
	name   string
	usage  string
	isBool bool
	get    func(c *Config) string // the current value, shown as the default in --help
	set    func(c *Config, v string) error
}

// EnvName is the environment variable that sets a flag: --lock-ttl → IDEMPROXY_LOCK_TTL.
func EnvName(flagName string) string {
	return "IDEMPROXY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func durationFlag(name, usage string, field func(c *Config) *Duration) flagSpec {
	return flagSpec{name: name, usage: usage,
		get: func(c *Config) string { return field(c).String() },
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%q is not a duration (Go syntax, e.g. 30s, 24h)", v)
			}
			if d < 0 {
				return fmt.Errorf("%q: a duration here must not be negative", v)
			}
			*field(c) = Duration(d)
			return nil
		}}
}

func stringFlag(name, usage string, field func(c *Config) *string) flagSpec {
	return flagSpec{name: name, usage: usage,
		get: func(c *Config) string { return *field(c) },
		set: func(c *Config, v string) error { *field(c) = v; return nil }}
}

func listFlag(name, usage string, field func(c *Config) *[]string) flagSpec {
	return flagSpec{name: name, usage: usage,
		get: func(c *Config) string { return strings.Join(*field(c), ",") },
		set: func(c *Config, v string) error { *field(c) = splitList(v); return nil }}
}

func boolFlag(name, usage string, field func(c *Config) **bool) flagSpec {
	return flagSpec{name: name, usage: usage, isBool: true,
		get: func(c *Config) string { return strconv.FormatBool(*field(c) != nil && **field(c)) },
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q is not a boolean (true or false)", v)
			}
			*field(c) = &b
			return nil
		}}
}

func sizeFlag(name, usage string, field func(c *Config) *Size) flagSpec {
	return flagSpec{name: name, usage: usage,
		get: func(c *Config) string { return strconv.FormatInt(int64(*field(c)), 10) },
		set: func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err != nil {
				return err
			}
			*field(c) = Size(n)
			return nil
		}}
}

func splitList(v string) []string {
	out := []string{}
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// flagSpecs lists every flag, in --help order.
var flagSpecs = []flagSpec{
	{name: "config", usage: "optional config file (YAML or JSON) for routes and webhooks; flags and variables override it",
		get: func(*Config) string { return "" }, set: func(*Config, string) error { return nil }},
	stringFlag("listen", "address to serve clients on", func(c *Config) *string { return &c.Listen }),
	stringFlag("upstream", "URL of the API to protect (required)", func(c *Config) *string { return &c.Upstream }),
	stringFlag("store", "memory, or a redis://, rediss://, redis+cluster:// or redis+sentinel:// URL", func(c *Config) *string { return &c.Store }),
	durationFlag("ttl", "how long a completed response is kept for replay", func(c *Config) *Duration { return &c.TTL }),
	durationFlag("lock-ttl", "in-flight lease, renewed while the upstream runs; a crashed instance's lock lapses after it", func(c *Config) *Duration { return &c.LockTTL }),
	boolFlag("require-key", "answer 400 to tracked requests without a key instead of passing them through", func(c *Config) **bool { return &c.RequireKey }),
	stringFlag("key-header", "request header carrying the key", func(c *Config) *string { return &c.KeyHeader }),
	listFlag("methods", "comma-separated methods to protect", func(c *Config) *[]string { return &c.Methods }),
	{name: "scope-headers", usage: "comma-separated request headers that, with the Host, scope a key (empty: Host only)",
		get: func(c *Config) string { return strings.Join(*c.ScopeHeaders, ",") },
		set: func(c *Config, v string) error { l := splitList(v); c.ScopeHeaders = &l; return nil }},
	listFlag("fingerprint-headers", "comma-separated request headers added to the fingerprint (method, path, query and body)", func(c *Config) *[]string { return &c.FingerprintHeaders }),
	sizeFlag("max-request-body", "largest request body accepted with a key (413 above)", func(c *Config) *Size { return &c.MaxRequestBody }),
	sizeFlag("max-body", "largest response body stored for replay (above: remembered, not replayable)", func(c *Config) *Size { return &c.MaxBody }),
	listFlag("store-statuses", "statuses stored for replay: codes, ranges (200-299), classes (2xx), !exclusions", func(c *Config) *[]string { return &c.StoreStatuses }),
	listFlag("ignore-headers", "comma-separated response headers never stored", func(c *Config) *[]string { return &c.IgnoreHeaders }),
	boolFlag("fail-open", "pass requests through unprotected when the store fails (default: 503)", func(c *Config) **bool { return &c.FailOpen }),
	durationFlag("wait", "let a duplicate of an in-flight request wait this long for its result instead of an immediate 409; 0 = no waiting", func(c *Config) *Duration { return &c.Wait }),
	boolFlag("in-flight-only", "deduplicate concurrent duplicates but store no result: a later retry runs again", func(c *Config) **bool { return &c.InFlightOnly }),
	durationFlag("handler-timeout", "bound on a first execution (it is not cancelled when the client hangs up); 0 = none", func(c *Config) *Duration { return &c.HandlerTimeout }),
	durationFlag("upstream-timeout", "time to wait for the upstream's response headers; 0 = none (handler-timeout still applies)", func(c *Config) *Duration { return &c.UpstreamTimeout }),
	durationFlag("shutdown-timeout", "on SIGINT/SIGTERM, how long in-flight requests may take to finish and be stored", func(c *Config) *Duration { return &c.ShutdownTimeout }),
	stringFlag("admin", "address of the admin listener (/healthz, /readyz, /metrics, /keys/); off when empty", func(c *Config) *string { return &c.Admin }),
	stringFlag("redis-prefix", "prefix of every Redis key", func(c *Config) *string { return &c.RedisPrefix }),
	{name: "memory-max-records", usage: "memory store: most records kept (oldest completed evicted first)",
		get: func(c *Config) string { return strconv.FormatInt(c.MemoryMaxRecs, 10) },
		set: func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%q is not a whole number", v)
			}
			c.MemoryMaxRecs = n
			return nil
		}},
	sizeFlag("memory-max-bytes", "memory store: most bytes kept", func(c *Config) *Size { return &c.MemoryMaxBytes }),
	stringFlag("log-format", "auto (JSON unless stderr is a terminal), json or text", func(c *Config) *string { return &c.LogFormat }),
	stringFlag("log-level", "debug, info, warn or error", func(c *Config) *string { return &c.LogLevel }),
}

// ErrHelp is returned by ParseArgs when --help was asked for; the usage was printed.
var ErrHelp = flag.ErrHelp

// ParseArgs builds the configuration: defaults, then the config file, then
// IDEMPROXY_* variables, then flags. It prints usage to out on --help.
func ParseArgs(args []string, getenv func(string) string, out io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("idemproxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	explicit := map[string]string{}
	for _, s := range flagSpecs {
		fs.Var(&recorded{name: s.name, into: explicit, isBool: s.isBool}, s.name, s.usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			Usage(out)
			return nil, ErrHelp
		}
		return nil, fmt.Errorf("%v (see idemproxy --help)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (see idemproxy --help)", fs.Arg(0))
	}
	c := DefaultConfig()
	path, ok := explicit["config"]
	if !ok {
		path = getenv(EnvName("config"))
	}
	if path != "" {
		if err := c.LoadFile(path); err != nil {
			return nil, err
		}
	}
	for _, s := range flagSpecs {
		v, fromFlag := explicit[s.name]
		source := "--" + s.name
		if !fromFlag {
			if v = getenv(EnvName(s.name)); v == "" {
				continue
			}
			source = EnvName(s.name)
		}
		if err := s.set(&c, v); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// recorded is a flag.Value that records the raw value given.
type recorded struct {
	name   string
	into   map[string]string
	isBool bool
}

func (r *recorded) String() string   { return "" }
func (r *recorded) IsBoolFlag() bool { return r.isBool }
func (r *recorded) Set(v string) error {
	r.into[r.name] = v
	return nil
}

// Usage prints the command's help: every flag, its variable and its default.
func Usage(out io.Writer) {
	d := DefaultConfig()
	fmt.Fprint(out, `idemproxy: an idempotency layer in front of any HTTP API.

Usage:
  idemproxy --upstream http://127.0.0.1:3000 [flags]
  idemproxy keys get|delete KEY [--admin ADDR] [--host HOST] [--header 'Name: value'] [--path /route]
  idemproxy version

Requests with an Idempotency-Key header run once; repeats get the stored response.
Every flag can also be set with the environment variable shown, and in the config file
(with underscores: lock_ttl). Precedence: flag, variable, file, default.

Flags:
`)
	for _, s := range flagSpecs {
		def := s.get(&d)
		if def == "" {
			def = `""`
		}
		kind := " value"
		if s.isBool {
			kind = ""
		}
		fmt.Fprintf(out, "  --%s%s\n      %s\n      default %s; env %s\n", s.name, kind, s.usage, def, EnvName(s.name))
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
