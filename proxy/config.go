package proxy

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/middleware"
)

// Config is the proxy's whole configuration: flags, IDEMPROXY_* variables and the
// optional file (YAML or JSON) all land here. Every setting (a field with a help
// tag, internal/conf) is a flag (its json name with dashes: lock_ttl →
// --lock-ttl), a variable (IDEMPROXY_LOCK_TTL) and a file key (lock_ttl): the
// proxy's own, the stores' (stores.Settings, prefixed: redis_prefix) and the
// core's (config.Config, which is also each route's).
type Config struct {
	Listen            string        `json:"listen" reload:"restart" help:"address to serve clients on"`
	Upstream          string        `json:"upstream" help:"URL of the API to protect: http://, https://, or h2c:// for cleartext HTTP/2 (a gRPC server without TLS) (required)"`
	Store             string        `json:"store" help:"memory, a redis://, rediss://, redis+cluster:// or redis+sentinel:// URL, a postgres:// (postgresql://) URL, or dynamodb://TABLE (region, credentials and endpoint from the AWS environment: AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB, instance roles)"`
	Admin             string        `json:"admin" reload:"restart" help:"address of the admin listener (/healthz, /readyz, /metrics, /keys/); off when empty"`
	AdminToken        string        `json:"admin_token" reload:"restart" help:"bearer token the admin API requires (all but /healthz); prefer the variable to the flag, which ps shows"`
	AdminHosts        []string      `json:"admin_hosts" reload:"restart" help:"host names the admin listener answers to, besides IP addresses and localhost (any other Host gets 403: DNS rebinding)"`
	Metrics           string        `json:"metrics" reload:"restart" help:"address of a metrics-only listener (/metrics, /healthz; no token), for Prometheus; off when empty"`
	UpstreamTimeout   time.Duration `json:"upstream_timeout" help:"time to wait for the upstream's response headers; 0 = none (handler-timeout still applies)"`
	ShutdownTimeout   time.Duration `json:"shutdown_timeout" help:"on SIGINT/SIGTERM, how long in-flight requests may take to finish and be stored (after a SIGHUP reload, the replaced configuration's background stores)"`
	ReadHeaderTimeout time.Duration `json:"read_header_timeout" reload:"restart" help:"time a client has to send its request headers"`
	IdleTimeout       time.Duration `json:"idle_timeout" reload:"restart" help:"how long an idle keep-alive client connection is kept"`
	LogFormat         string        `json:"log_format" reload:"restart" help:"auto (JSON unless stderr is a terminal), json or text"`
	LogLevel          string        `json:"log_level" reload:"restart" help:"debug, info, warn or error"`

	// TLSCert and TLSKey are the PEM files of the client listener's certificate
	// (its chain) and private key: with both set, the listener serves HTTPS,
	// HTTP/2 and HTTP/1.1, and SIGHUP reads them again.
	TLSCert string `json:"tls_cert" help:"PEM file of the client listener's certificate chain; with tls_key, the listener serves HTTPS and HTTP/2 (re-read on SIGHUP)"`
	TLSKey  string `json:"tls_key" help:"PEM file of the private key of tls_cert (re-read on SIGHUP)"`

	// TrustedProxies are the peers (CIDRs or addresses) whose X-Forwarded-For,
	// -Proto, -Host and Forwarded headers are kept and extended, and whose
	// other client-address headers (X-Real-IP, True-Client-IP, …) are kept;
	// from any other peer they are removed or replaced with what the proxy saw
	// (forwarding.go, addressheaders.go).
	TrustedProxies []string `json:"trusted_proxies" help:"CIDRs or addresses of load balancers whose X-Forwarded-*, Forwarded, X-Real-IP and other client-address headers and request id are kept (and extended); others' are removed or replaced"`
	// UpstreamHost is the Host the upstream receives, with forwarded and
	// reconcile requests alike: "upstream" (the upstream URL's), "client"
	// (the one the client sent, in canonical form), or a host name.
	UpstreamHost string `json:"upstream_host" help:"Host sent upstream, reconcile requests included: upstream (the upstream URL's host), client (the client's Host, canonical), or a literal host[:port]"`
	// RequestIDHeader carries the request id: taken from a trusted proxy's
	// request when it is well formed, generated otherwise, sent upstream and
	// logged as request_id. Empty: generated and logged, not sent.
	RequestIDHeader string `json:"request_id_header" help:"header of the request id: kept from a trusted proxy when well formed, generated otherwise; sent upstream and logged (empty: logged only)"`

	// Stores are every store's settings; Store's URL picks which apply.
	Stores stores.Settings `conf:"prefix="`

	// The core's settings for requests no route matches, and the defaults of
	// every route.
	config.Config

	// Routes, matched by longest path prefix on whole segments.
	Routes []Route

	// sources names where each set field came from, for error messages.
	sources map[string]string
	// tracing: the OTEL_* variables asked for traces (Run sets it).
	tracing bool
	// file is the config file read, if any; reload builds the configuration
	// again from the same flags and variables and the file as it is now
	// (ParseArgs sets it).
	file   string
	reload func() (*Config, error)
}

// Route is the protection of one path prefix. A setting set in a route wins over
// the top level, zero included; an unset one takes the top level's value.
type Route struct {
	Path    string
	Enabled bool
	config.Config

	// file and lines locate a route read from a config file, for error
	// messages: the line of its item, and of each key it sets.
	file  string
	line  int
	lines map[string]int
}

// where names route i in an error about its setting field: its index and path
// and, from a file, the file and the line of the key (of the route when the
// route does not set it).
func (r *Route) where(i int, field string) string {
	name := fmt.Sprintf("routes[%d] (%s)", i, r.Path)
	if field == "path" {
		name = fmt.Sprintf("routes[%d]", i)
	}
	if r.file == "" {
		return name
	}
	line, ok := r.lines[field]
	if !ok {
		line = r.line
	}
	return fmt.Sprintf("config file %s line %d: %s", r.file, line, name)
}

// Defaults.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultStore           = "memory"
	DefaultShutdownTimeout = 30 * time.Second
)

// fields are the proxy's settings, its own, the stores' and the core's;
// routeFields a route's.
var (
	fields      = conf.Fields(reflect.TypeFor[Config]())
	routeFields = conf.Fields(reflect.TypeFor[config.Config]())
)

// DefaultConfig is the configuration before flags, variables and file.
func DefaultConfig() Config {
	return Config{
		Listen:            DefaultListen,
		Store:             DefaultStore,
		ShutdownTimeout:   DefaultShutdownTimeout,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		LogFormat:         "auto",
		LogLevel:          "info",
		UpstreamHost:      UpstreamHostUpstream,
		RequestIDHeader:   "X-Request-Id",
		Stores:            stores.DefaultSettings(),
		Config:            config.Default(),
	}
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

// Validate checks the whole configuration, naming the flag, variable or file key
// at fault.
func (c *Config) Validate() error {
	if c.Upstream == "" {
		return errors.New("--upstream is required (the API to protect, e.g. http://127.0.0.1:3000)")
	}
	if _, _, err := upstreamURL(c.Upstream); err != nil { // h2c.go
		return fmt.Errorf("%s %q: %w", c.source("upstream"), c.Upstream, err)
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
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("%s and %s: set both or neither", c.source("tls_cert"), c.source("tls_key"))
	}
	if _, err := parsePrefixes(c.TrustedProxies); err != nil {
		return fmt.Errorf("%s: %w", c.source("trusted_proxies"), err)
	}
	if err := validUpstreamHost(c.UpstreamHost); err != nil {
		return fmt.Errorf("%s %q: %w", c.source("upstream_host"), c.UpstreamHost, err)
	}
	if c.RequestIDHeader != "" && !isToken(c.RequestIDHeader) {
		return fmt.Errorf("%s %q: not a header name", c.source("request_id_header"), c.RequestIDHeader)
	}
	if err := c.Stores.Validate(c.Store); err != nil {
		return c.storeError(err)
	}
	if kind, _ := stores.KindOf(c.Store); kind != "" {
		for _, f := range fields {
			if store, _, ok := strings.Cut(f.Name, "_"); ok && isStoreKind(store) && store != kind && c.sources[f.Name] != "" {
				return fmt.Errorf("%s: applies to a %s store; --store is %s", c.source(f.Name), store, kind)
			}
		}
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
		return c.named(err, nil, 0)
	}
	seen := map[string]string{}
	for i := range c.Routes {
		r := &c.Routes[i]
		if !strings.HasPrefix(r.Path, "/") {
			return fmt.Errorf("%s: path %q must start with /", r.where(i, "path"), r.Path)
		}
		_, match, err := middleware.CanonicalPath(r.Path)
		if err != nil {
			return fmt.Errorf("%s: path %q: %v", r.where(i, "path"), r.Path, err)
		}
		if prev, ok := seen[match]; ok {
			return fmt.Errorf("%s: path %q appears twice (routes match in any case: %q is the same route)", r.where(i, "path"), r.Path, prev)
		}
		seen[match] = r.Path
		if err := c.Config.Merged(r.Config).Validate(); err != nil {
			return c.named(err, r, i)
		}
	}
	return c.checkReconcile()
}

// named puts the flag, variable or file key in front of a core configuration
// error: of the top level, or of route i (r) and, when the route inherits the
// setting at fault, where the top level set it.
func (c *Config) named(err error, r *Route, i int) error {
	var ce *middleware.SettingsError
	if !errors.As(err, &ce) {
		return err
	}
	if r == nil {
		return fmt.Errorf("%s: %w", c.source(ce.Field), ce.Err)
	}
	err = fmt.Errorf("%s: %s: %w", r.where(i, ce.Field), ce.Field, ce.Err)
	if _, own := r.lines[ce.Field]; !own && c.sources[ce.Field] != "" {
		err = fmt.Errorf("%w (the route inherits %s)", err, c.sources[ce.Field])
	}
	return err
}

// route returns the core settings of route r: the top level with r's set fields.
func (c *Config) route(r Route) config.Config { return c.Config.Merged(r.Config) }

// isStoreKind reports whether a setting's first word names a store.
func isStoreKind(s string) bool {
	for _, k := range stores.Kinds {
		if k.Name == s {
			return true
		}
	}
	return false
}

// storeError names the flag, variable or file key of a store setting at fault.
func (c *Config) storeError(err error) error {
	var fe *stores.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("%s: %w", c.source(fe.Store+"_"+fe.Field), fe.Err)
	}
	return fmt.Errorf("%s: %w", c.source("store"), err)
}
