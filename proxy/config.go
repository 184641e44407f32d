package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/middleware"
	"go.yaml.in/yaml/v3"
)

// Config is the proxy's whole configuration: flags, IDEMPROXY_* variables and the
// optional file (YAML or JSON) all land here. Field names in the file are the flag
// names with underscores (lock_ttl for --lock-ttl).
type Config struct {
	Listen          string   `yaml:"listen"`
	Upstream        string   `yaml:"upstream"`
	Store           string   `yaml:"store"`
	Admin           string   `yaml:"admin"`
	RedisPrefix     string   `yaml:"redis_prefix"`
	MemoryMaxRecs   int64    `yaml:"memory_max_records"`
	MemoryMaxBytes  Size     `yaml:"memory_max_bytes"`
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	UpstreamTimeout Duration `yaml:"upstream_timeout"`
	LogFormat       string   `yaml:"log_format"`
	LogLevel        string   `yaml:"log_level"`

	// Route is the protection applied to requests no route in Routes matches.
	Route `yaml:",inline"`
	// Routes, matched by longest path prefix.
	Routes []Route `yaml:"routes"`
}

// Route is the protection of one path prefix. Unset fields of a route in Routes
// take the top-level value.
type Route struct {
	Path       string   `yaml:"path,omitempty"`
	Enabled    *bool    `yaml:"enabled,omitempty"`
	Methods    []string `yaml:"methods,omitempty"`
	RequireKey *bool    `yaml:"require_key,omitempty"`
	KeyHeader  string   `yaml:"key_header,omitempty"`
	TTL        Duration `yaml:"ttl,omitempty"`
	LockTTL    Duration `yaml:"lock_ttl,omitempty"`
	// ScopeHeaders is a pointer: an empty list (scope by Host only) differs from none given.
	ScopeHeaders       *[]string `yaml:"scope_headers,omitempty"`
	FingerprintHeaders []string  `yaml:"fingerprint_headers,omitempty"`
	MaxRequestBody     Size      `yaml:"max_request_body,omitempty"`
	MaxBody            Size      `yaml:"max_body,omitempty"`
	StoreStatuses      []string  `yaml:"store_statuses,omitempty"`
	IgnoreHeaders      []string  `yaml:"ignore_headers,omitempty"`
	FailOpen           *bool     `yaml:"fail_open,omitempty"`
	HandlerTimeout     Duration  `yaml:"handler_timeout,omitempty"`
	Wait               Duration  `yaml:"wait,omitempty"`
	InFlightOnly       *bool     `yaml:"in_flight_only,omitempty"`
}

// Defaults.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultStore           = "memory"
	DefaultShutdownTimeout = 30 * time.Second
)

// DefaultConfig is the configuration before flags, variables and file.
func DefaultConfig() Config {
	yes, no := true, false
	scope := append([]string(nil), middleware.DefaultScopeHeaders...)
	return Config{
		Listen:          DefaultListen,
		Store:           DefaultStore,
		RedisPrefix:     "idem:",
		MemoryMaxRecs:   memstore.DefaultMaxRecords,
		MemoryMaxBytes:  memstore.DefaultMaxBytes,
		ShutdownTimeout: Duration(DefaultShutdownTimeout),
		LogFormat:       "auto",
		LogLevel:        "info",
		Route: Route{
			Enabled:        &yes,
			Methods:        append([]string(nil), middleware.DefaultMethods...),
			RequireKey:     &no,
			KeyHeader:      middleware.DefaultKeyHeader,
			TTL:            Duration(middleware.DefaultTTL),
			LockTTL:        Duration(middleware.DefaultLockTTL),
			ScopeHeaders:   &scope,
			MaxRequestBody: middleware.DefaultMaxRequestBody,
			MaxBody:        middleware.DefaultMaxStoredBody,
			StoreStatuses:  []string{"200-499", "!408", "!425", "!429"},
			FailOpen:       &no,
			HandlerTimeout: Duration(middleware.DefaultHandlerTimeout),
			InFlightOnly:   &no,
		},
	}
}

// LoadFile merges the file at path (YAML, or JSON) into c. Unknown fields are errors.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
		msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", ";")), " ")
		msg = fieldNotFound.ReplaceAllString(msg, "unknown field $1")
		return fmt.Errorf("config file %s: %s", path, msg)
	}
	return nil
}

// Validate checks the whole configuration, naming the field at fault.
func (c *Config) Validate() error {
	if c.Upstream == "" {
		return errors.New("--upstream is required (the API to protect, e.g. http://127.0.0.1:3000)")
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--upstream %q: want an absolute http:// or https:// URL", c.Upstream)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q: want host:port", c.Listen)
	}
	if c.Admin != "" {
		if _, _, err := net.SplitHostPort(c.Admin); err != nil {
			return fmt.Errorf("--admin %q: want host:port", c.Admin)
		}
	}
	if c.Store != "memory" {
		if !strings.HasPrefix(c.Store, "redis") {
			return fmt.Errorf("--store %q: want memory or a redis://, rediss://, redis+cluster:// or redis+sentinel:// URL", c.Store)
		}
		client, err := redisstore.NewClient(c.Store) // parses only; nothing is dialled yet
		if err != nil {
			return fmt.Errorf("--store: %w", err)
		}
		client.Close()
	}
	if c.MemoryMaxRecs < 1 {
		return fmt.Errorf("--memory-max-records must be at least 1")
	}
	if c.MemoryMaxBytes < 1 {
		return fmt.Errorf("--memory-max-bytes must be at least 1")
	}
	switch c.LogFormat {
	case "auto", "json", "text":
	default:
		return fmt.Errorf("--log-format %q: want auto, json or text", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.ShutdownTimeout < 0 || c.UpstreamTimeout < 0 {
		return fmt.Errorf("timeouts must not be negative")
	}
	seen := map[string]bool{}
	for i, r := range c.Routes {
		if !strings.HasPrefix(r.Path, "/") {
			return fmt.Errorf("routes[%d]: path %q must start with /", i, r.Path)
		}
		if seen[r.Path] {
			return fmt.Errorf("routes[%d]: path %q appears twice", i, r.Path)
		}
		seen[r.Path] = true
	}
	return nil
}

// resolved returns r with unset fields taken from the top level.
func (c *Config) resolved(r Route) Route {
	d := c.Route
	if r.Enabled == nil {
		r.Enabled = d.Enabled
	}
	if r.Methods == nil {
		r.Methods = d.Methods
	}
	if r.RequireKey == nil {
		r.RequireKey = d.RequireKey
	}
	if r.KeyHeader == "" {
		r.KeyHeader = d.KeyHeader
	}
	if r.TTL == 0 {
		r.TTL = d.TTL
	}
	if r.LockTTL == 0 {
		r.LockTTL = d.LockTTL
	}
	if r.ScopeHeaders == nil {
		r.ScopeHeaders = d.ScopeHeaders
	}
	if r.FingerprintHeaders == nil {
		r.FingerprintHeaders = d.FingerprintHeaders
	}
	if r.MaxRequestBody == 0 {
		r.MaxRequestBody = d.MaxRequestBody
	}
	if r.MaxBody == 0 {
		r.MaxBody = d.MaxBody
	}
	if r.StoreStatuses == nil {
		r.StoreStatuses = d.StoreStatuses
	}
	if r.IgnoreHeaders == nil {
		r.IgnoreHeaders = d.IgnoreHeaders
	}
	if r.FailOpen == nil {
		r.FailOpen = d.FailOpen
	}
	if r.HandlerTimeout == 0 {
		r.HandlerTimeout = d.HandlerTimeout
	}
	if r.Wait == 0 {
		r.Wait = d.Wait
	}
	if r.InFlightOnly == nil {
		r.InFlightOnly = d.InFlightOnly
	}
	return r
}

// options turns a resolved route into middleware options.
func (r Route) options() ([]middleware.Option, error) {
	statuses, err := middleware.ParseStatuses(r.StoreStatuses...)
	if err != nil {
		return nil, fmt.Errorf("store_statuses: %w", err)
	}
	return []middleware.Option{
		middleware.WithMethods(r.Methods...),
		middleware.WithRequireKey(*r.RequireKey),
		middleware.WithKeyHeader(r.KeyHeader),
		middleware.WithTTL(time.Duration(r.TTL)),
		middleware.WithLockTTL(time.Duration(r.LockTTL)),
		middleware.WithScopeHeaders(*r.ScopeHeaders...),
		middleware.WithFingerprintHeaders(r.FingerprintHeaders...),
		middleware.WithMaxRequestBody(int64(r.MaxRequestBody)),
		middleware.WithMaxStoredBody(int64(r.MaxBody)),
		middleware.WithStoreStatuses(statuses),
		middleware.WithIgnoredHeaders(r.IgnoreHeaders...),
		middleware.WithFailOpen(*r.FailOpen),
		middleware.WithHandlerTimeout(time.Duration(r.HandlerTimeout)),
		middleware.WithWait(time.Duration(r.Wait)),
		middleware.WithInFlightOnly(*r.InFlightOnly),
	}, nil
}

// Duration is a time.Duration written in Go syntax ("30s", "24h").
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (Go syntax, e.g. 30s, 24h)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

func (d Duration) String() string { return time.Duration(d).String() }

// Size is a byte count: a number, optionally with a unit (KB, MB, GB, KiB, MiB, GiB).
type Size int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = Size(v)
	return nil
}

var fieldNotFound = regexp.MustCompile(`field (\S+) not found in type \S+`)

var sizeUnits = map[string]int64{
	"": 1, "B": 1,
	"KB": 1000, "MB": 1000 * 1000, "GB": 1000 * 1000 * 1000,
	"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30,
	"K": 1 << 10, "M": 1 << 20, "G": 1 << 30,
}

// ParseSize parses "10MiB", "512KB", "1048576".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	unit, ok := sizeUnits[strings.ToUpper(strings.TrimSpace(t[i:]))]
	if err != nil || !ok || n < 0 {
		units := make([]string, 0, len(sizeUnits))
		for u := range sizeUnits {
			if u != "" && len(u) > 1 {
				units = append(units, u)
			}
		}
		sort.Strings(units)
		return 0, fmt.Errorf("%q is not a size (a number of bytes, optionally with a unit: %s)", s, strings.Join(units, ", "))
	}
	if n > (1<<62)/unit {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * unit, nil
}
