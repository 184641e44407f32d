package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
	"go.yaml.in/yaml/v3"
)

// Config is the proxy's whole configuration: flags, IDEMPROXY_* variables and the
// optional file (YAML or JSON) all land here. Every field with a help tag is a flag
// (its json name with dashes: lock_ttl → --lock-ttl), a variable (IDEMPROXY_LOCK_TTL)
// and a file key (lock_ttl). The core's settings are middleware.Config, embedded.
type Config struct {
	Listen                string              `json:"listen" yaml:"listen" help:"address to serve clients on"`
	Upstream              string              `json:"upstream" yaml:"upstream" help:"URL of the API to protect (required)"`
	Store                 string              `json:"store" yaml:"store" help:"memory, a redis://, rediss://, redis+cluster:// or redis+sentinel:// URL, or a postgres:// (postgresql://) URL"`
	Admin                 string              `json:"admin" yaml:"admin" help:"address of the admin listener (/healthz, /readyz, /metrics, /keys/); off when empty"`
	AdminToken            string              `json:"admin_token" yaml:"admin_token" help:"bearer token the admin API requires (all but /healthz); prefer the variable to the flag, which ps shows"`
	AdminHosts            []string            `json:"admin_hosts" yaml:"admin_hosts" help:"host names the admin listener answers to, besides IP addresses and localhost (any other Host gets 403: DNS rebinding)"`
	Metrics               string              `json:"metrics" yaml:"metrics" help:"address of a metrics-only listener (/metrics, /healthz; no token), for Prometheus; off when empty"`
	RedisPrefix           string              `json:"redis_prefix" yaml:"redis_prefix" help:"prefix of every Redis key"`
	RedisAllowEviction    bool                `json:"redis_allow_eviction" yaml:"redis_allow_eviction" help:"start even when Redis's maxmemory-policy may evict keys (in-flight locks included); default: refuse"`
	RedisWaitReplicas     int64               `json:"redis_wait_replicas" yaml:"redis_wait_replicas" help:"replicas that must acknowledge every write (Redis WAIT) before a request is forwarded or answered; 0 = none (see Redis failover in README)"`
	RedisWaitTimeout      middleware.Duration `json:"redis_wait_timeout" yaml:"redis_wait_timeout" help:"how long a write waits for redis_wait_replicas; when too few acknowledge, the request is answered 503 and not forwarded"`
	PostgresTable         string              `json:"postgres_table" yaml:"postgres_table" help:"PostgreSQL store: the table (schema.name allowed)"`
	PostgresCreateSchema  bool                `json:"postgres_create_schema" yaml:"postgres_create_schema" help:"PostgreSQL store: create the table and its index at start-up when missing; false: they must exist (idemproxy migrate prints the DDL)"`
	PostgresSweepInterval middleware.Duration `json:"postgres_sweep_interval" yaml:"postgres_sweep_interval" help:"PostgreSQL store: how often expired rows are deleted, in small batches; 0 = never by this instance"`
	MemoryMaxRecords      int64               `json:"memory_max_records" yaml:"memory_max_records" help:"memory store: most records kept (shared between clients; see README)"`
	MemoryMaxBytes        middleware.Size     `json:"memory_max_bytes" yaml:"memory_max_bytes" help:"memory store: most bytes kept (approximate)"`
	UpstreamTimeout       middleware.Duration `json:"upstream_timeout" yaml:"upstream_timeout" help:"time to wait for the upstream's response headers; 0 = none (handler-timeout still applies)"`
	ShutdownTimeout       middleware.Duration `json:"shutdown_timeout" yaml:"shutdown_timeout" help:"on SIGINT/SIGTERM, how long in-flight requests may take to finish and be stored"`
	ReadHeaderTimeout     middleware.Duration `json:"read_header_timeout" yaml:"read_header_timeout" help:"time a client has to send its request headers"`
	IdleTimeout           middleware.Duration `json:"idle_timeout" yaml:"idle_timeout" help:"how long an idle keep-alive client connection is kept"`
	LogFormat             string              `json:"log_format" yaml:"log_format" help:"auto (JSON unless stderr is a terminal), json or text"`
	LogLevel              string              `json:"log_level" yaml:"log_level" help:"debug, info, warn or error"`

	// The core's settings for requests no route matches, and the defaults of
	// every route.
	middleware.Config `yaml:",inline"`

	// Routes, matched by longest path prefix on whole segments.
	Routes []Route `json:"routes,omitempty" yaml:"routes,omitempty"`

	// sources names where each set field came from, for error messages.
	sources map[string]string
	// tracing: the OTEL_* variables asked for traces (Run sets it).
	tracing bool
}

// Route is the protection of one path prefix. A field set in a route wins over the
// top level, zero included; an unset one takes the top level's value.
type Route struct {
	Path    string `json:"path" yaml:"path"`
	Enabled *bool  `json:"enabled,omitempty" yaml:"enabled,omitempty"`

	middleware.Config `yaml:",inline"`
}

// Defaults.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultStore           = "memory"
	DefaultShutdownTimeout = middleware.Duration(30e9)
)

// fields are the proxy's settings, its own and the core's.
var fields = conf.Fields(reflect.TypeFor[Config]())

// DefaultConfig is the configuration before flags, variables and file.
func DefaultConfig() Config {
	return Config{
		Listen:                DefaultListen,
		Store:                 DefaultStore,
		RedisPrefix:           stores.DefaultRedisPrefix,
		RedisWaitTimeout:      middleware.Duration(stores.DefaultRedisWaitTimeout),
		PostgresTable:         stores.DefaultPostgresTable,
		PostgresCreateSchema:  true,
		PostgresSweepInterval: middleware.Duration(stores.DefaultPostgresSweepInterval),
		MemoryMaxRecords:      stores.DefaultMemoryMaxRecords,
		MemoryMaxBytes:        middleware.Size(stores.DefaultMemoryMaxBytes),
		ShutdownTimeout:       DefaultShutdownTimeout,
		ReadHeaderTimeout:     middleware.Duration(10 * time.Second),
		IdleTimeout:           middleware.Duration(2 * time.Minute),
		LogFormat:             "auto",
		LogLevel:              "info",
		Config:                middleware.DefaultConfig(),
	}
}

// LoadFile merges the file at path (YAML, or JSON) into c. Unknown fields are errors.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var file Config // what the file sets, to name it in errors
	for _, into := range []*Config{c, &file} {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(into); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("config file %s: %s", path, yamlMessage(err))
		}
	}
	for _, f := range fields {
		if f.IsSet(&file) {
			c.note(f.Name, f.Name+" in "+path)
		}
	}
	return nil
}

func (c *Config) note(field, source string) {
	if c.sources == nil {
		c.sources = map[string]string{}
	}
	c.sources[field] = source
}

// source names where field was set: "--lock-ttl", "IDEMPROXY_LOCK_TTL", or the
// file key; the field's name when it was not set explicitly.
func (c *Config) source(field string) string {
	if s, ok := c.sources[field]; ok {
		return s
	}
	return field
}

// hostName is a DNS name as admin_hosts takes it: labels of letters, digits,
// hyphens and underscores, an optional trailing dot.
var hostName = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$`)

var fieldNotFound = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlMessage makes a YAML decoding error one line.
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
	return fieldNotFound.ReplaceAllString(msg, "unknown field $1")
}

// Validate checks the whole configuration, naming the flag, variable or file key
// at fault.
func (c *Config) Validate() error {
	if c.Upstream == "" {
		return errors.New("--upstream is required (the API to protect, e.g. http://127.0.0.1:3000)")
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want an absolute http:// or https:// URL", c.source("upstream"), c.Upstream)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%s %q: want host:port", c.source("listen"), c.Listen)
	}
	if c.Admin != "" {
		if _, _, err := net.SplitHostPort(c.Admin); err != nil {
			return fmt.Errorf("%s %q: want host:port", c.source("admin"), c.Admin)
		}
	}
	for _, h := range c.AdminHosts {
		if !hostName.MatchString(h) {
			return fmt.Errorf("%s: %q: want a host name without port or scheme (e.g. admin.internal)", c.source("admin_hosts"), h)
		}
	}
	if c.Metrics != "" {
		if _, _, err := net.SplitHostPort(c.Metrics); err != nil {
			return fmt.Errorf("%s %q: want host:port", c.source("metrics"), c.Metrics)
		}
	}
	if c.RedisWaitReplicas < 0 {
		return fmt.Errorf("%s: must not be negative, got %d", c.source("redis_wait_replicas"), c.RedisWaitReplicas)
	}
	if c.RedisWaitReplicas > 0 && c.RedisWaitTimeout < middleware.Duration(time.Millisecond) {
		return fmt.Errorf("%s: must be at least 1ms when waiting for replicas, got %v", c.source("redis_wait_timeout"), c.RedisWaitTimeout)
	}
	if kind, _ := stores.KindOf(c.Store); kind != "redis" && c.RedisWaitReplicas > 0 {
		return fmt.Errorf("%s: applies to a Redis store; --store is %s", c.source("redis_wait_replicas"), kind)
	}
	if err := stores.Check(c.storeSpec()); err != nil {
		return fmt.Errorf("%s: %w", c.source("store"), err)
	}
	if c.MemoryMaxRecords < 1 {
		return fmt.Errorf("%s: must be at least 1", c.source("memory_max_records"))
	}
	if c.MemoryMaxBytes < 1 {
		return fmt.Errorf("%s: must be at least 1B", c.source("memory_max_bytes"))
	}
	if c.ReadHeaderTimeout <= 0 {
		return fmt.Errorf("%s: must be positive", c.source("read_header_timeout"))
	}
	if c.IdleTimeout <= 0 {
		return fmt.Errorf("%s: must be positive", c.source("idle_timeout"))
	}
	switch c.LogFormat {
	case "auto", "json", "text":
	default:
		return fmt.Errorf("%s %q: want auto, json or text", c.source("log_format"), c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return fmt.Errorf("%s %q: want debug, info, warn or error", c.source("log_level"), c.LogLevel)
	}
	if err := c.Config.Validate(); err != nil {
		return c.named(err, "")
	}
	seen := map[string]string{}
	for i, r := range c.Routes {
		where := fmt.Sprintf("routes[%d] (%s)", i, r.Path)
		if !strings.HasPrefix(r.Path, "/") {
			return fmt.Errorf("routes[%d]: path %q must start with /", i, r.Path)
		}
		_, match, err := middleware.CanonicalPath(r.Path)
		if err != nil {
			return fmt.Errorf("routes[%d]: path %q: %v", i, r.Path, err)
		}
		if prev, ok := seen[match]; ok {
			return fmt.Errorf("routes[%d]: path %q appears twice (routes match in any case: %q is the same route)", i, r.Path, prev)
		}
		seen[match] = r.Path
		if err := c.Config.Merged(r.Config).Validate(); err != nil {
			return c.named(err, where)
		}
	}
	return nil
}

// named puts the flag, variable or file key in front of a core configuration error.
func (c *Config) named(err error, route string) error {
	var ce *middleware.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	if route != "" {
		return fmt.Errorf("%s: %s: %w", route, ce.Field, ce.Err)
	}
	return fmt.Errorf("%s: %w", c.source(ce.Field), ce.Err)
}

// route returns the core settings of route r: the top level with r's set fields.
func (c *Config) route(r Route) middleware.Config { return c.Config.Merged(r.Config) }

func (c *Config) storeSpec() stores.Spec {
	return stores.Spec{URL: c.Store, RedisPrefix: c.RedisPrefix, RedisAllowEviction: c.RedisAllowEviction,
		RedisWaitReplicas: c.RedisWaitReplicas, RedisWaitTimeout: time.Duration(c.RedisWaitTimeout),
		MemoryMaxRecords: c.MemoryMaxRecords, MemoryMaxBytes: int64(c.MemoryMaxBytes),
		PostgresTable: c.PostgresTable, PostgresCreateSchema: c.PostgresCreateSchema, PostgresSweepInterval: time.Duration(c.PostgresSweepInterval)}
}
