// Package webhook verifies webhook providers' signatures before a delivery's key
// is claimed, and picks each provider's key: Standard Webhooks (and Svix's own
// header names), Stripe, GitHub, and a generic HMAC. Each provider is a Preset,
// described once (presets.go): Presets lists them for the configuration's help
// and errors. A Verifier is a middleware.Verifier; its KeySource is the
// preset's key (key_source: auto).
// Secrets come from references (env:NAME, file:PATH), never from the
// configuration itself, and are never quoted in an error.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/middleware"
)

// The presets' names (Presets has each one's description).
const (
	// Standard is Standard Webhooks (Svix and others): webhook-id,
	// webhook-timestamp and webhook-signature ("v1,<base64>", space-separated),
	// HMAC-SHA256 over "id.timestamp.body" with the base64 secret after "whsec_".
	// A delivery with none of the webhook-* headers is read under Svix's own
	// names, svix-id, svix-timestamp and svix-signature, as Svix's libraries
	// do; the two sets are never mixed. The key is the signed id.
	Standard = "standard"
	// Stripe is Stripe: Stripe-Signature "t=…,v1=<hex>,…", HMAC-SHA256 over
	// "t.body" with the endpoint secret as it is. The key is the body's /id.
	Stripe = "stripe"
	// GitHub is GitHub: X-Hub-Signature-256 "sha256=<hex>", HMAC-SHA256 over
	// the body. The key is a digest of the signed body (the delivery id is not
	// signed).
	GitHub = "github"
	// HMAC is a generic HMAC-SHA256 over the body in a header of your
	// choice (webhook_header), hex or base64, after an optional prefix. The key is
	// a digest of the signed body unless key_source names a field of it.
	HMAC = "hmac"
)

// DefaultTolerance is the default of webhook_tolerance: how far a signed
// timestamp may be from now.
const DefaultTolerance = 5 * time.Minute

// macSize is the size of a signature: an HMAC-SHA256.
const macSize = sha256.Size

// Webhook is a provider's signature scheme, checked on every tracked request of a
// handler before its key is claimed: a request whose signature does not verify
// gets 401 and nothing is claimed, stored or forwarded.
type Webhook struct {
	// Preset is the name of one of Presets: Standard, Stripe, GitHub, HMAC.
	Preset string
	// Secrets are the signing secrets as the provider shows them (whsec_… for
	// Standard Webhooks); a signature made with any of them verifies, so a
	// secret can be rotated without downtime. At least one.
	Secrets []string
	// Tolerance is how far the signed timestamp may be from now, either way,
	// for a preset that signs one (Preset.Timestamp: standard, stripe): it
	// must be positive there, as webhook_tolerance must be on every surface;
	// DefaultTolerance is the usual. Other presets do not read it.
	Tolerance time.Duration
	// Header, Encoding ("hex", the default, or "base64") and Prefix describe
	// the signature of a Custom preset (hmac), e.g. X-Signature, hex,
	// "sha256=".
	Header, Encoding, Prefix string
}

// Verifier is a compiled Webhook: a middleware.Verifier.
type Verifier struct {
	Webhook
	preset   Preset
	keys     [][]byte // HMAC keys, one per secret
	header   string   // the signature's header, canonical
	encoding encoding // a Custom preset's
	now      func() time.Time
}

// errors of a signature check: their text is the 401 problem's detail.
var (
	errSigMissing  = errors.New("the request carries no signature")
	errSigMismatch = errors.New("no signature matches the body with any configured secret")
	errSigOld      = errors.New("the signed timestamp is outside the tolerance")
	errSigBadTime  = errors.New("the signed timestamp is not a Unix time")
)

// New checks w and compiles it; a bad setting is a *cache.FieldError
// naming it (webhook, webhook_secrets, …).
func New(w Webhook) (*Verifier, error) {
	w.Secrets = append([]string(nil), w.Secrets...)
	p, ok := lookup(w.Preset)
	if !ok {
		return nil, cache.FieldErrorf("", "webhook", "%q: want %s", w.Preset, conf.OrList(Names()))
	}
	v := &Verifier{Webhook: w, preset: p, header: p.Header, now: time.Now}
	if len(v.Secrets) == 0 {
		return nil, cache.FieldErrorf("", "webhook_secrets", "the %s preset needs at least one secret", v.Preset)
	}
	if p.Custom {
		if err := v.custom(); err != nil {
			return nil, err
		}
	} else if v.Header != "" || v.Prefix != "" {
		return nil, cache.FieldErrorf("", "webhook_header", "webhook_header and webhook_prefix apply to the %s preset only; %s has its own header",
			conf.OrList(names(func(p Preset) bool { return p.Custom })), v.Preset)
	}
	for i, s := range v.Secrets {
		if s == "" {
			return nil, cache.FieldErrorf("", "webhook_secrets", "secret %d is empty", i+1)
		}
		key := []byte(s)
		if p.secret != nil {
			var err error
			if key, err = p.secret(s); err != nil {
				return nil, cache.FieldErrorf("", "webhook_secrets", "secret %d %v", i+1, err)
			}
		}
		v.keys = append(v.keys, key)
	}
	if v.Tolerance < 0 || v.Tolerance == 0 && p.Timestamp {
		return nil, cache.FieldErrorf("", "webhook_tolerance", "must be positive, got %v", v.Tolerance)
	}
	return v, nil
}

// custom checks and compiles the settings of a Custom preset's signature.
func (v *Verifier) custom() error {
	if !validHeaderName(v.Header) {
		return cache.FieldErrorf("", "webhook_header", "the %s preset needs the header that carries the signature, got %q", v.Preset, v.Header)
	}
	if v.Encoding == "" {
		v.Encoding = encodings[0].name
	}
	i := slices.IndexFunc(encodings, func(e encoding) bool { return e.name == v.Encoding })
	if i < 0 {
		return cache.FieldErrorf("", "webhook_encoding", "%q: want %s", v.Encoding, conf.OrList(Encodings()))
	}
	v.encoding = encodings[i]
	v.header = http.CanonicalHeaderKey(v.Header)
	return nil
}

// Verify implements middleware.Verifier: it checks r's signature over body.
func (v *Verifier) Verify(r *http.Request, body []byte) error {
	s, err := v.preset.read(v, r.Header)
	if err != nil {
		return err
	}
	if v.preset.Timestamp {
		if err := v.fresh(s.timestamp); err != nil {
			return err
		}
	}
	return v.verifyMAC(s.macs, s.prefix, body)
}

// verifyMAC reports whether any of macs is the HMAC-SHA256 of prefix+body
// under any key, in constant time per compare.
func (v *Verifier) verifyMAC(macs [][]byte, prefix, body []byte) error {
	if len(macs) == 0 {
		return errSigMismatch
	}
	for _, k := range v.keys {
		sum := mac(k, prefix, body)
		for _, got := range macs {
			if hmac.Equal(got, sum) {
				return nil
			}
		}
	}
	return errSigMismatch
}

// mac is the HMAC-SHA256 of prefix+body under key.
func mac(key, prefix, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(prefix)
	m.Write(body)
	return m.Sum(nil)
}

// fresh checks a signed Unix timestamp against the tolerance, either way.
func (v *Verifier) fresh(ts string) error {
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errSigBadTime
	}
	if d := v.now().Sub(time.Unix(secs, 0)); d > v.Tolerance || d < -v.Tolerance {
		return fmt.Errorf("%w (%v)", errSigOld, v.Tolerance)
	}
	return nil
}

// Challenge implements middleware.Verifier: the WWW-Authenticate of the 401.
func (v *Verifier) Challenge() string { return `Webhook-Signature header="` + v.header + `"` }

// ID implements middleware.Verifier.
func (v *Verifier) ID() string { return v.Preset }

// KeySource is the preset's key (key_source auto): Standard, the signed id
// (webhook-id, or svix-id under Svix's names); Stripe, the body's /id; GitHub
// and HMAC, a digest of the signed body, the only part of a delivery they sign.
func (v *Verifier) KeySource() middleware.KeySource { return v.preset.key() }

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
