package proxy

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// Config is the proxy's whole configuration: flags, IDEMPROXY_* variables and the
// optional file (YAML or JSON) all land here. Every setting (a field with a json
// name, internal/conf) is a flag (its json name with dashes: lock_ttl →
// --lock-ttl), a variable (IDEMPROXY_LOCK_TTL) and a file key (lock_ttl): the
// proxy's own, the stores' (stores.Settings, prefixed: redis_prefix) and the
// core's (config.Config, which is also each route's). A setting's doc comment
// is its documentation: go generate ./test/settingsdoc makes it its row in
// docs/settings.md and the help --help prints (internal/conf's
// settingshelp_gen.go).
type Config struct {
	// Address the proxy serves clients on, HTTP/1.1 and cleartext HTTP/2 with
	// prior knowledge (h2c, for gRPC clients; over TLS, HTTP/2 by ALPN) (a port
	// of 0: a free one, named in the start-up line).
	//
	// Default: 127.0.0.1:8080.
	Listen string `json:"listen" reload:"restart" caddy:"site address"`

	// The API behind the proxy: an http:// or https:// URL (HTTP/2 by ALPN), or
	// h2c://host:port for cleartext HTTP/2 with prior knowledge (a gRPC server
	// without TLS; see docs/grpc.md).
	//
	// Default: required.
	Upstream string `json:"upstream" caddy:"'reverse_proxy'" default:"required"`

	// Where locks and responses live (see docs/stores.md): ${stores}.
	//
	// Default: memory.
	Store string `json:"store" go:"the 'cache.Store' given to 'middleware.New'"`

	// Address of the admin listener: health, metrics, keys ('/healthz',
	// '/readyz', '/metrics', '/keys/'); off when empty.
	//
	// Default: off.
	Admin string `json:"admin" reload:"restart" caddy:"Caddy admin; its '/metrics' has the same 'idemproxy_*' metrics" default:"off"`

	// Off when empty; else the bearer token the admin API requires on every
	// endpoint but '/healthz'; set it with IDEMPROXY_ADMIN_TOKEN (a flag shows
	// in 'ps'); 'idemproxy keys' sends it from the same variable.
	//
	// Default: off.
	AdminToken string `json:"admin_token" reload:"restart" caddy:"Caddy admin" default:"off"`

	// Host names the admin listener answers to, besides IP addresses and
	// 'localhost'; a request with any other Host gets '403' (DNS rebinding).
	// List the names you reach the admin port by.
	//
	// Default: none.
	AdminHosts []string `json:"admin_hosts" reload:"restart" caddy:"Caddy admin: its 'origins'"`

	// Address of a metrics-only listener ('/metrics', '/healthz', '/readyz'; no
	// token), for Prometheus and probes ('idemproxy healthcheck' asks its
	// '/readyz'); off when empty.
	//
	// Default: off.
	Metrics string `json:"metrics" reload:"restart" caddy:"Caddy admin '/metrics', or Caddy's 'metrics' handler" default:"off"`

	// Wait for the upstream's response headers; '0': none (handler_timeout still
	// applies). With 'reconcile', also how long the upstream may still run a
	// request the proxy gave up on: no not-found answer releases a key before.
	//
	// Default: 0s.
	UpstreamTimeout time.Duration `json:"upstream_timeout" caddy:"'reverse_proxy' transport"`

	// Drain time on SIGINT/SIGTERM: how long in-flight requests may take to
	// finish and be stored; after a SIGHUP reload, how long the replaced
	// configuration's responses may take to be stored before its store is
	// closed.
	//
	// Default: 30s.
	ShutdownTimeout time.Duration `json:"shutdown_timeout" caddy:"Caddy 'grace_period'"`

	// Time a client has to send its request headers (over TLS, its handshake).
	//
	// Default: 10s.
	ReadHeaderTimeout time.Duration `json:"read_header_timeout" reload:"restart" caddy:"Caddy 'timeouts'"`

	// How long an idle keep-alive client connection is kept.
	//
	// Default: 2m.
	IdleTimeout time.Duration `json:"idle_timeout" reload:"restart" caddy:"Caddy 'timeouts'"`

	// 'auto' (JSON unless stderr is a terminal), 'json' or 'text'.
	//
	// Default: auto.
	LogFormat string `json:"log_format" reload:"restart" caddy:"Caddy's logging"`

	// 'debug', 'info', 'warn' or 'error'.
	//
	// Default: info.
	LogLevel string `json:"log_level" reload:"restart" caddy:"Caddy's logging"`

	// Log a request line for every request, the untracked ones too (outcome
	// 'untracked'); off: tracked requests only.
	//
	// Default: false.
	AccessLog bool `json:"access_log"`

	// PEM certificate chain of the client listener; with tls_key it serves
	// HTTPS, HTTP/2 and HTTP/1.1, with the same limits. Read again on SIGHUP;
	// turning TLS on or off takes a restart (see
	// docs/proxy.md#reload-tls-load-balancers).
	//
	// Default: none.
	TLSCert string `json:"tls_cert" reload:"restart-on-off" caddy:"Caddy's 'tls'"`

	// PEM private key of tls_cert; read again on SIGHUP.
	//
	// Default: none.
	TLSKey string `json:"tls_key" reload:"restart-on-off" caddy:"Caddy's 'tls'"`

	// CIDRs or addresses ('10.0.0.0/8', 'fd00::/8', '192.0.2.7') of load
	// balancers whose X-Forwarded-For, -Proto, -Host, Forwarded and request id
	// are kept and extended, and whose other client-address headers (X-Real-IP,
	// True-Client-IP, CF-Connecting-IP, … see
	// docs/proxy.md#reload-tls-load-balancers) are kept; from any other peer
	// they are removed or replaced by what the proxy saw (X-Real-IP: the peer).
	//
	// Default: none.
	TrustedProxies []string `json:"trusted_proxies" caddy:"Caddy's 'trusted_proxies'"`

	// The Host the upstream receives: 'upstream' (the upstream URL's), 'client'
	// (the client's Host, in canonical form: lower case, without a default port
	// or a trailing dot), or a literal 'host[:port]'; reconcile requests get the
	// same.
	//
	// Default: upstream.
	UpstreamHost string `json:"upstream_host" caddy:"'reverse_proxy' 'header_up Host'"`

	// Header of the request id every request line logs: kept from a trusted
	// proxy when well formed (1–128 visible characters), generated otherwise;
	// sent upstream. Empty: generated and logged, not sent.
	//
	// Default: X-Request-Id.
	RequestIDHeader string `json:"request_id_header" caddy:"Caddy's '{http.request.uuid}'"`

	// Stores are every store's settings (internal/stores.Drivers), each named
	// with its store's name in front (redis_prefix); Store's URL picks which
	// apply.
	Stores stores.Settings

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
	// overrides are the file's settings a flag or variable replaced
	// (ParseArgs sets them; the start-up line's notes say so).
	overrides []override
	// compiled are the top level's and the routes' settings as Validate
	// compiled them; nil before. compiledFrom is the digest of what they were
	// compiled from: a Config changed since (or a copy changed since) is
	// compiled again (stale); an unchanged copy (a reload keeping the running
	// restart-only settings) shares them.
	compiled     []compiledRoute
	compiledFrom [32]byte
}

// override is a setting of the config file that a flag or variable replaced.
type override struct{ setting, by, file string }

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

// routeFields are a route's settings.
var routeFields = conf.Fields(reflect.TypeFor[config.Config]())

// fields are the proxy's settings, its own, the stores' and the core's: read
// at each use, for the stores are those of the registry (stores.Drivers).
func fields() []conf.Field { return conf.Fields(reflect.TypeFor[Config]()) }

// HelpList implements conf.Lister: the stores, for the help of store, and
// the core's lists.
func (c Config) HelpList(name string) (string, bool) {
	if name == "stores" {
		return stores.Help(), true
	}
	return c.Config.HelpList(name)
}

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
// at fault, and compiles every route's settings (reading webhook secrets):
// New and Reload build the routes from what it compiled, and compile again a
// Config whose settings changed since (ParseArgs runs it).
func (c *Config) Validate() error {
	if c.Upstream == "" {
		return errors.New("--upstream is required (the API behind the proxy, e.g. http://127.0.0.1:3000)")
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
	def := DefaultConfig()
	var ne *conf.NeedsError
	err := conf.CheckNeeds(fields(), c, &def, func(feature string) (string, bool) {
		if feature != "store" {
			return "", false
		}
		kind, _ := stores.KindOf(c.Store) // checked above
		return kind, true
	})
	if errors.As(err, &ne) {
		return fmt.Errorf("%s: %w", c.source(ne.Field), ne)
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
	routes, err := c.compileRoutes()
	if err != nil {
		return err
	}
	c.compiled, c.compiledFrom = routes, c.compileInput()
	return nil
}

// compileInput is a digest of what compileRoutes reads: the core's settings,
// the routes, and upstream_timeout (the reconcile rules add it).
func (c *Config) compileInput() [32]byte {
	b, err := json.Marshal(struct {
		Top             config.Config
		Routes          []Route
		UpstreamTimeout time.Duration
	}{c.Config, c.Routes, c.UpstreamTimeout})
	if err != nil {
		return [32]byte{} // never equal to a digest: compiled again
	}
	return sha256.Sum256(b)
}

// stale reports whether c must be compiled (again) before New or Reload use
// it: never validated, or its settings changed since.
func (c *Config) stale() bool {
	return c.compiled == nil || c.compiledFrom == [32]byte{} || c.compileInput() != c.compiledFrom
}

// named puts the flag, variable or file key in front of a core configuration
// error: of the top level, or of route i (r) and, when the route inherits the
// setting at fault, where the top level set it.
func (c *Config) named(err error, r *Route, i int) error {
	var ce *cache.FieldError
	if !errors.As(err, &ce) || ce.Store != "" {
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

// storeError names the flag, variable or file key of a store setting at fault.
func (c *Config) storeError(err error) error {
	var fe *cache.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("%s: %w", c.source(fe.Store+"_"+fe.Field), fe.Err)
	}
	return fmt.Errorf("%s: %w", c.source("store"), err)
}
