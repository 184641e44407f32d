package proxy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// EnvPrefix is the prefix of the variables that set flags: --lock-ttl → IDEMPROXY_LOCK_TTL.
const EnvPrefix = "IDEMPROXY_"

// EnvName is the environment variable that sets a flag: --lock-ttl → IDEMPROXY_LOCK_TTL.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

const configHelp = "optional config file (YAML or JSON) for routes and webhooks; flags and variables override it"

// splitList splits a comma-separated list; "" is the empty list.
func splitList(v string) []string {
	out := []string{}
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// set sets field f of c from the text of a flag or variable.
func set(c *Config, f conf.Field, v string) error {
	if f.List() {
		return f.Set(c, splitList(v)...)
	}
	return f.Set(c, v)
}

// ErrHelp is returned by ParseArgs when --help was asked for; the usage was printed.
var ErrHelp = flag.ErrHelp

// ParseArgs builds the configuration: defaults, then the config file, then
// IDEMPROXY_* variables, then flags. It prints usage to out on --help. Every error
// is one line that names the flag, variable or file key at fault.
func ParseArgs(args []string, getenv func(string) string, out io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("idemproxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	explicit := map[string]string{}
	fs.Var(&recorded{name: "config", into: explicit}, "config", configHelp)
	for _, f := range fields() {
		fs.Var(&recorded{name: f.FlagName(), into: explicit, isBool: f.Bool()}, f.FlagName(), f.Help)
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
	for _, f := range fields() {
		v, fromFlag := explicit[f.FlagName()]
		source := "--" + f.FlagName()
		if !fromFlag {
			if v = getenv(f.EnvName(EnvPrefix)); v == "" {
				continue
			}
			source = f.EnvName(EnvPrefix)
		}
		if err := set(&c, f, v); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if prev := c.sources[f.Name]; prev != "" {
			c.overrides = append(c.overrides, override{setting: f.Name, by: source, file: prev})
		}
		c.note(f.Name, source)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.file = path
	c.reload = func() (*Config, error) { return ParseArgs(args, getenv, io.Discard) }
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
  idemproxy keys get|delete|release|resolve KEY [--admin ADDR] [--host HOST] [--header 'Name: value'] [--path /route]
  idemproxy keys get|delete|release|resolve --hash KEY_HASH [--admin ADDR | --caddy ADDR [--handler NAME]]
  idemproxy keys list --held [--admin ADDR | --caddy ADDR [--handler NAME]] [--limit N] [--cursor C | --all]
  idemproxy validate --config FILE [flags]     check a configuration as start-up does (no store contacted)
  idemproxy healthcheck [--url URL]            probe a running instance's /readyz (exit 0: ready)
  idemproxy conformance --target URL [--path /v1/charges] [--header 'Authorization: …'] [--level draft|strict] [--json]
                                               check any server that enforces Idempotency-Key (docs/conformance.md)
  idemproxy migrate [--postgres-table NAME] [--apply --store postgres://…]
  idemproxy migrate --store dynamodb://TABLE [--apply]
  idemproxy sign --webhook PRESET --secret env:NAME|file:PATH [--id ID] --body TEXT
  idemproxy version (or --version)

Requests with an Idempotency-Key header run once; repeats get the stored response.
Every flag can also be set with the environment variable shown, and in the config file
(with underscores: lock_ttl). Precedence: flag, variable, file, default. Sizes take a
unit (512B, 64KiB, 10MiB, 10MB); durations take Go syntax or days (500ms, 30s, 24h, 2d).
SIGHUP reloads: the same flags and variables, the config file as it is now, the TLS
files (docs/proxy.md: Reload, TLS, load balancers); SIGINT and SIGTERM drain and stop.
Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set;
every OTEL_* variable of the OpenTelemetry SDK applies (see docs/tracing.md).

Flags:
`)
	fmt.Fprintf(out, "  --config value\n%s      default \"\"; env %s\n", wrap(configHelp, "      ", 86), EnvName("config"))
	for _, f := range fields() {
		def := f.Text(&d)
		switch {
		case def != "":
		case f.Bool():
			def = "false"
		case f.Int():
			def = "0"
		default:
			def = `""`
		}
		kind := " value"
		if f.Bool() {
			kind = ""
		}
		fmt.Fprintf(out, "  --%s%s\n%s      default %s; env %s\n", f.FlagName(), kind, wrap(f.Help, "      ", 86), def, f.EnvName(EnvPrefix))
	}
}

// wrap breaks text into lines of at most width characters where it can, each
// after indent and ending in a newline.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(text) {
		if line != indent && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
