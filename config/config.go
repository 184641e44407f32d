// Package config is idemproxy's configuration: the core's settings as every
// surface writes them (the proxy's flags, IDEMPROXY_* variables, config file and
// routes; Caddy's JSON and Caddyfile), compiled once into middleware.Settings.
//
// A Config is middleware.Settings (whose tagged fields are the settings, with
// their defaults in middleware.DefaultSettings) plus the settings that are
// configuration sugar for what plugs into the core: key_source (package
// keysource), error_format (package errformat), fingerprint… (package
// fingerprint) and webhook… (package webhook).
// It records which settings were set, so a proxy route's unset settings take the
// top level's (Merged). Every surface derives its names and its parsing from
// the struct's tags, and its help from the field's doc comment (internal/conf):
// adding a setting is one field with a json tag and a doc comment ending with
// its default (in middleware.Settings, or here for configuration sugar), the
// code that uses it, and go generate ./test/settingsdoc for its row in
// docs/settings.md and its --help text (internal/conf/settingshelp_gen.go).
package config

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/fingerprint"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/webhook"
)

// Config is the core's settings as configuration writes them. Start from
// Default: a zero Config has no defaults.
type Config struct {
	// The core's settings (methods, ttl, lock_ttl, …), each documented on
	// its field; their defaults are middleware.DefaultSettings.
	middleware.Settings

	// Where the key comes from: 'auto' (key_header, or where the webhook preset
	// puts it), ${key_source}. A missing or non-string field is a missing key;
	// an ambiguous one (a name twice on the pointer's path, a form field twice,
	// a ';' in a form body, a protobuf field on the path twice or of another
	// wire type, a compressed message) is '400' (see docs/webhooks.md,
	// docs/grpc.md).
	//
	// Default: auto.
	KeySourceSpec string `json:"key_source" go:"'KeySource', 'keysource.Parse'"`

	// Verify a provider's signature before the key is claimed: ${webhook}; a bad
	// or missing one is '401', nothing claimed, stored or forwarded. Empty: no
	// verification.
	//
	// Default: none.
	Webhook string `json:"webhook" go:"'Verifier', 'webhook.New'"`

	// The signing secrets as 'env:NAME' (a variable) or 'file:PATH' (one secret
	// per line); a signature made with any of them verifies (rotation). Never
	// logged; a secret itself is refused in a configuration.
	//
	// Default: none.
	WebhookSecrets []string `json:"webhook_secrets" needs:"webhook" go:"'webhook.Webhook.Secrets' (the secrets themselves: 'webhook.LoadSecrets')"`

	// How far a signed timestamp (${webhook_timestamp}) may be from now, either
	// way. Must be positive: '0s' is refused ('webhook.New' holds the rule for
	// every surface); a preset that signs no timestamp does not read it.
	//
	// Default: 5m.
	WebhookTolerance time.Duration `json:"webhook_tolerance" needs:"webhook" go:"'webhook.Webhook.Tolerance'"`

	// ${webhook_custom}: the header carrying the signature.
	//
	// Default: none.
	WebhookHeader string `json:"webhook_header" needs:"webhook" go:"'webhook.Webhook.Header'"`

	// ${webhook_custom}: the signature's encoding, ${webhook_encoding}.
	//
	// Default: hex.
	WebhookEncoding string `json:"webhook_encoding" needs:"webhook" go:"'webhook.Webhook.Encoding'"`

	// ${webhook_custom}: text before the signature in its header, e.g.
	// 'sha256='.
	//
	// Default: none.
	WebhookPrefix string `json:"webhook_prefix" needs:"webhook" go:"'webhook.Webhook.Prefix'"`

	// How the body counts in the fingerprint: 'bytes' (as sent), 'json' (RFC
	// 8785 canonical form: member order, whitespace, number forms and escapes do
	// not count), 'form' (fields sorted; a repeated field's values keep their
	// order), 'multipart' (each part's meaningful headers and bytes, not the
	// boundary); a body that cannot be read one way only is '400' (see
	// docs/fingerprints.md).
	//
	// Default: bytes.
	FingerprintSpec string `json:"fingerprint" go:"'BodyFingerprint', 'fingerprint.Parse'"`

	// RFC 6901 pointers left out of a 'json', 'form' or 'multipart' fingerprint:
	// '/request_time', '/meta/sent_at'; for a form or multipart body a field,
	// '/name'.
	//
	// Default: none.
	FingerprintIgnore []string `json:"fingerprint_ignore" go:"the pointers of 'fingerprint.Parse'"`

	// Shape of the answers the core writes itself (409, 422, 400, 503, …):
	// ${error_format}, or a JSON template whose strings hold '{type}' '{title}'
	// '{status}' '{detail}' '{code}' '{retry_after}'. Every such answer carries
	// Idempotency-Problem (its type), Cache-Control: no-store, and the request's
	// key (see docs/clients.md#error-formats).
	//
	// Default: problem.
	ErrorFormatSpec string `json:"error_format" go:"'ErrorFormat', 'errformat.Parse'"`

	// The reconcile… settings: settling held unknown outcomes by asking
	// the upstream (reconcile.go), the proxy's only. Default: off (no
	// reconcile request).
	Reconcile Reconcile `conf:"prefix=" go:"reconcile.Rules"`

	set map[string]bool // the settings set (MarkSet), by name
}

// Default returns the configuration with every setting at its default and none
// set.
func Default() Config {
	return Config{
		Settings:         middleware.DefaultSettings(),
		KeySourceSpec:    keysource.Auto,
		ErrorFormatSpec:  errformat.Problem,
		FingerprintSpec:  fingerprint.Bytes,
		WebhookTolerance: webhook.DefaultTolerance,
		WebhookEncoding:  "hex",
		Reconcile:        DefaultReconcile(),
	}
}

// fields are the settings of Config.
var fields = conf.Fields(reflect.TypeFor[Config]())

// Set sets the setting named name (lock_ttl) from its text form, as a flag or a
// Caddyfile line gives it, and records it as set.
func (c *Config) Set(name string, args ...string) error {
	f, ok := conf.Lookup(fields, name)
	if !ok {
		return fmt.Errorf("unknown setting %q", name)
	}
	return f.Set(c, args...)
}

// MarkSet records the setting named name as set (conf.Tracker).
func (c *Config) MarkSet(name string) {
	if c.set == nil {
		c.set = map[string]bool{}
	}
	c.set[name] = true
}

// IsSet reports whether the setting named name was set.
func (c Config) IsSet(name string) bool { return c.set[name] }

// Merged returns c with every setting set in over replacing c's (a proxy route
// over the top level): a set setting wins, zero included.
func (c Config) Merged(over Config) Config {
	out := c
	out.set = map[string]bool{}
	for name := range c.set {
		out.set[name] = true
	}
	for _, f := range fields {
		if over.set[f.Name] {
			f.Copy(&out, &over)
			out.set[f.Name] = true
		}
	}
	return out
}

// Compile returns the core's settings: c's, with the key source, the verifier
// and the error format built from their configuration strings. Every error is a
// *cache.FieldError naming the setting at fault; FieldOf reads it.
func (c Config) Compile() (middleware.Settings, error) {
	s := c.Settings
	d := Default()
	var ne *conf.NeedsError
	if err := conf.CheckNeeds(fields, &c, &d, nil); errors.As(err, &ne) {
		return s, &cache.FieldError{Field: ne.Field, Err: ne}
	}
	var v *webhook.Verifier
	if c.Webhook != "" {
		secrets, err := webhook.LoadSecrets(c.WebhookSecrets)
		if err != nil {
			return s, err
		}
		v, err = webhook.New(webhook.Webhook{Preset: c.Webhook, Secrets: secrets, Tolerance: c.WebhookTolerance,
			Header: c.WebhookHeader, Encoding: c.WebhookEncoding, Prefix: c.WebhookPrefix})
		if err != nil {
			return s, err
		}
		s.Verifier = v
	}
	if c.KeySourceSpec == keysource.Auto || c.KeySourceSpec == "" {
		if v != nil {
			s.KeySource = v.KeySource()
		}
	} else {
		ks, err := keysource.Parse(c.KeySourceSpec, c.KeyHeader)
		if err != nil {
			return s, cache.FieldErrorf("", "key_source", "%v", err)
		}
		// A signature covers the body and the preset's own headers: a key
		// source that reads no body reads what it does not cover.
		if v != nil && !ks.NeedsBody() {
			return s, cache.FieldErrorf("", "key_source", "%s: the %s signature does not cover %s, so a captured delivery could be sent again under a new key; use auto, or a key source that reads the signed body",
				c.KeySourceSpec, c.Webhook, ks.Describe())
		}
		s.KeySource = ks
	}
	if _, err := fingerprint.Parse(c.FingerprintSpec, nil); err != nil {
		return s, cache.FieldErrorf("", "fingerprint", "%v", err)
	}
	bf, err := fingerprint.Parse(c.FingerprintSpec, c.FingerprintIgnore)
	if err != nil {
		return s, cache.FieldErrorf("", "fingerprint_ignore", "%v", err)
	}
	s.BodyFingerprint = bf
	ef, err := errformat.Parse(c.ErrorFormatSpec)
	if err != nil {
		return s, err
	}
	s.ErrorFormat = ef
	if _, err := c.ReconcileRules(s); err != nil {
		return s, err
	}
	return s, s.Check()
}

// Validate checks c as Compile and middleware.New would.
func (c Config) Validate() error {
	_, err := c.Compile()
	return err
}

// FieldOf returns the setting named in err, if err is (or wraps) a
// *cache.FieldError.
func FieldOf(err error) (string, bool) {
	var se *cache.FieldError
	if errors.As(err, &se) {
		return se.Field, true
	}
	return "", false
}
