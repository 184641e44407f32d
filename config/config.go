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
// top level's (Merged). Every surface derives its names, its parsing and its
// help from the struct's tags (internal/conf): adding a setting is one field in
// middleware.Settings, the code that uses it, and its row in docs/settings.md.
package config

import (
	"errors"
	"fmt"
	"reflect"
	"time"

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
	middleware.Settings

	// KeySourceSpec is where the key comes from: "auto" (key_header, or where
	// the webhook preset puts it) or a spec of one of keysource.Kinds:
	// "header" (key_header), "body" (a SHA-256 of the body), "json:<pointer>"
	// (a string in the JSON body at an RFC 6901 pointer, e.g.
	// json:/data/idempotency_key), "form:<field>" (a field of a form-encoded
	// body), "proto:<N>" (a string field of a gRPC or protobuf request
	// message by number; proto:N.M nested). A missing or non-string field is
	// a missing key; an ambiguous one (a name twice on the pointer's path, a
	// form field twice, a ";", a protobuf field twice) an invalid key.
	KeySourceSpec string `json:"key_source" help:"where the key comes from: auto (key_header, or the webhook preset's key), ${key_source}"`

	// Webhook verifies a provider's signature before the key is claimed: the
	// name of one of webhook.Presets ("standard": Standard Webhooks, and
	// Svix's svix-* names; "stripe"; "github"; "hmac": HMAC-SHA256 of the body
	// in webhook_header). A bad or missing signature gets 401; nothing is
	// claimed, stored or forwarded. Empty: no verification.
	Webhook string `json:"webhook" help:"verify a webhook signature before the key is claimed: ${webhook}; empty: none"`

	// WebhookSecrets are the webhook's signing secrets, as references:
	// "env:NAME" (a variable) or "file:PATH" (one secret per line). A
	// signature made with any of them verifies (rotation). Secrets themselves
	// never go in a configuration, and are never logged.
	WebhookSecrets []string `json:"webhook_secrets" help:"webhook signing secrets as env:NAME or file:PATH (one per line); several for rotation"`

	// WebhookTolerance is how far a signed timestamp (standard, stripe) may
	// be from now, either way; it must be positive (webhook.New holds the
	// rule: a preset that signs no timestamp does not read it).
	WebhookTolerance time.Duration `json:"webhook_tolerance" help:"how far a signed timestamp (${webhook_timestamp}) may be from now, either way; must be positive"`

	// WebhookHeader is the header carrying the signature, for the hmac
	// preset.
	WebhookHeader string `json:"webhook_header" help:"${webhook_custom} preset: the header carrying the signature"`

	// WebhookEncoding is the signature's encoding for the hmac preset: hex or
	// base64.
	WebhookEncoding string `json:"webhook_encoding" help:"${webhook_custom} preset: the signature's encoding, ${webhook_encoding}"`

	// WebhookPrefix is text before the signature in its header for the hmac
	// preset, e.g. "sha256=".
	WebhookPrefix string `json:"webhook_prefix" help:"${webhook_custom} preset: text before the signature in its header (e.g. sha256=)"`

	// FingerprintSpec is how the body counts in the fingerprint: "bytes" (as
	// sent), "json" (RFC 8785 canonical form: member order, whitespace,
	// number forms and escapes do not count), "form" (fields sorted; a
	// repeated field's values keep their order) or "multipart" (each part's
	// meaningful headers and bytes, not the boundary). A body that cannot be
	// read one way only in its format gets 400. See docs/fingerprints.md.
	FingerprintSpec string `json:"fingerprint" help:"how the body counts in the fingerprint: bytes, json (RFC 8785 canonical), form (fields sorted) or multipart (parts, not the boundary)"`

	// FingerprintIgnore are RFC 6901 JSON pointers left out of a json, form
	// or multipart fingerprint: /request_time (for a form or multipart
	// body, a field name).
	FingerprintIgnore []string `json:"fingerprint_ignore" help:"JSON pointers left out of a json, form or multipart fingerprint (/request_time; form and multipart: /field)"`

	// ErrorFormatSpec is the shape of the answers the core writes itself
	// (409, 422, 400, 503, …): the name of one of errformat.Formats
	// ("problem": RFC 9457; "stripe": Stripe's error object with
	// Stripe-Should-Retry), or a JSON template whose
	// strings hold {type}, {title}, {status}, {detail}, {code} or
	// {retry_after}. Every such answer carries Idempotency-Problem (its
	// type), Cache-Control: no-store, and the request's key.
	ErrorFormatSpec string `json:"error_format" help:"shape of the answers the core writes itself: ${error_format}, or a JSON template with {type} {title} {status} {detail} {code} {retry_after}"`

	Reconcile Reconcile `conf:"prefix="` // reconcile…: settling held unknown outcomes (reconcile.go)

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
// *middleware.SettingsError naming the setting at fault; FieldOf reads it.
func (c Config) Compile() (middleware.Settings, error) {
	s := c.Settings
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
	} else if name := c.strayWebhookSetting(); name != "" {
		return s, middleware.SettingsErrorf(name, "applies to a webhook route, and webhook is not set")
	}
	if c.KeySourceSpec == keysource.Auto || c.KeySourceSpec == "" {
		if v != nil {
			s.KeySource = v.KeySource()
		}
	} else {
		ks, err := keysource.Parse(c.KeySourceSpec, c.KeyHeader)
		if err != nil {
			return s, middleware.SettingsErrorf("key_source", "%v", err)
		}
		// A signature covers the body and the preset's own headers: a key
		// source that reads no body reads what it does not cover.
		if v != nil && !ks.NeedsBody() {
			return s, middleware.SettingsErrorf("key_source", "%s: the %s signature does not cover %s, so a captured delivery could be sent again under a new key; use auto, or a key source that reads the signed body",
				c.KeySourceSpec, c.Webhook, ks.Describe())
		}
		s.KeySource = ks
	}
	if _, err := fingerprint.Parse(c.FingerprintSpec, nil); err != nil {
		return s, middleware.SettingsErrorf("fingerprint", "%v", err)
	}
	bf, err := fingerprint.Parse(c.FingerprintSpec, c.FingerprintIgnore)
	if err != nil {
		return s, middleware.SettingsErrorf("fingerprint_ignore", "%v", err)
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

// strayWebhookSetting names a webhook_* setting that differs from its default
// while webhook is not set: it would have no effect.
func (c Config) strayWebhookSetting() string {
	d := Default()
	for _, name := range []string{"webhook_secrets", "webhook_tolerance", "webhook_header", "webhook_encoding", "webhook_prefix"} {
		f, _ := conf.Lookup(fields, name)
		if !f.Equal(&c, &d) && !(name == "webhook_secrets" && len(c.WebhookSecrets) == 0) {
			return name
		}
	}
	return ""
}

// Validate checks c as Compile and middleware.New would.
func (c Config) Validate() error {
	_, err := c.Compile()
	return err
}

// FieldOf returns the setting named in err, if err is (or wraps) a
// *middleware.SettingsError.
func FieldOf(err error) (string, bool) {
	var se *middleware.SettingsError
	if errors.As(err, &se) {
		return se.Field, true
	}
	return "", false
}
