// Package webhook verifies webhook providers' signatures before a delivery's key
// is claimed, and picks each provider's key: Standard Webhooks (and Svix's own
// header names), Stripe, GitHub, and a generic HMAC. A Verifier is a
// middleware.Verifier; its KeySource is the preset's key (key_source: auto).
// Secrets come from references (env:NAME, file:PATH), never from the
// configuration itself, and are never quoted in an error.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/middleware"
)

// Webhook signature presets: the value of the webhook setting.
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

// DefaultTolerance is how far a signed timestamp may be from now.
const DefaultTolerance = 5 * time.Minute

// Webhook is a provider's signature scheme, checked on every tracked request of a
// handler before its key is claimed: a request whose signature does not verify
// gets 401 and nothing is claimed, stored or forwarded.
type Webhook struct {
	// Preset is Standard, Stripe, GitHub or HMAC.
	Preset string
	// Secrets are the signing secrets as the provider shows them (whsec_… for
	// Standard Webhooks); a signature made with any of them verifies, so a
	// secret can be rotated without downtime. At least one.
	Secrets []string
	// Tolerance is how far the signed timestamp may be from now (standard,
	// stripe). Default DefaultTolerance.
	Tolerance time.Duration
	// Header, Encoding ("hex" or "base64") and Prefix describe the signature of
	// the hmac preset, e.g. X-Signature, hex, "sha256=".
	Header, Encoding, Prefix string
}

// Verifier is a compiled Webhook: a middleware.Verifier.
type Verifier struct {
	Webhook
	keys   [][]byte // HMAC keys, one per secret
	header string   // the signature's header, canonical
	now    func() time.Time
}

// errors of a signature check: their text is the 401 problem's detail.
var (
	errSigMissing  = errors.New("the request carries no signature")
	errSigMismatch = errors.New("no signature matches the body with any configured secret")
	errSigOld      = errors.New("the signed timestamp is outside the tolerance")
	errSigBadTime  = errors.New("the signed timestamp is not a Unix time")
)

// New checks w and compiles it; a bad setting is a *middleware.SettingsError
// naming it (webhook, webhook_secrets, …).
func New(w Webhook) (*Verifier, error) {
	w.Secrets = append([]string(nil), w.Secrets...)
	v := &Verifier{Webhook: w, now: time.Now}
	if v.Tolerance == 0 {
		v.Tolerance = DefaultTolerance
	}
	if v.Tolerance < 0 {
		return nil, middleware.SettingsErrorf("webhook_tolerance", "must be positive, got %v", v.Tolerance)
	}
	if len(v.Secrets) == 0 {
		return nil, middleware.SettingsErrorf("webhook_secrets", "the %s preset needs at least one secret", v.Preset)
	}
	if v.Preset != HMAC && (v.Header != "" || v.Prefix != "") {
		return nil, middleware.SettingsErrorf("webhook_header", "webhook_header and webhook_prefix apply to the hmac preset only; %s has its own header", v.Preset)
	}
	switch v.Preset {
	case Standard:
		v.header = "Webhook-Signature"
	case Stripe:
		v.header = "Stripe-Signature"
	case GitHub:
		v.header = "X-Hub-Signature-256"
	case HMAC:
		if !validHeaderName(v.Header) {
			return nil, middleware.SettingsErrorf("webhook_header", "the hmac preset needs the header that carries the signature, got %q", v.Header)
		}
		if v.Encoding == "" {
			v.Encoding = "hex"
		}
		if v.Encoding != "hex" && v.Encoding != "base64" {
			return nil, middleware.SettingsErrorf("webhook_encoding", "%q: want hex or base64", v.Encoding)
		}
		v.header = http.CanonicalHeaderKey(v.Header)
	default:
		return nil, middleware.SettingsErrorf("webhook", "%q: want standard, stripe, github or hmac", v.Preset)
	}
	for i, s := range v.Secrets {
		if s == "" {
			return nil, middleware.SettingsErrorf("webhook_secrets", "secret %d is empty", i+1)
		}
		key := []byte(s)
		if v.Preset == Standard {
			// The secret is base64 after an optional whsec_ prefix; the HMAC key
			// is the decoded bytes. The secret itself is never named in errors.
			b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
			if err != nil || len(b) == 0 {
				return nil, middleware.SettingsErrorf("webhook_secrets", "secret %d is not a Standard Webhooks secret (whsec_ and base64)", i+1)
			}
			key = b
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// Verify implements middleware.Verifier: it checks r's signature over body.
func (v *Verifier) Verify(r *http.Request, body []byte) error {
	h := r.Header
	if v.Preset == Standard {
		return v.verifyStandard(h, body)
	}
	sig := h.Values(v.header)
	if len(sig) == 0 || sig[0] == "" {
		return fmt.Errorf("%w: no %s header", errSigMissing, v.header)
	}
	switch v.Preset {
	case Stripe:
		return v.verifyStripe(strings.Join(sig, ","), body)
	case GitHub:
		return v.verifyMAC(sig, "sha256=", hex.DecodeString, nil, body)
	default:
		decode := hex.DecodeString
		if v.Encoding == "base64" {
			decode = base64.StdEncoding.DecodeString
		}
		return v.verifyMAC(sig, v.Prefix, decode, nil, body)
	}
}

func (v *Verifier) verifyStandard(h http.Header, body []byte) error {
	names := standardNamesOf(h)
	sig := h.Values(names.signature)
	if len(sig) == 0 || sig[0] == "" {
		return fmt.Errorf("%w: no %s header", errSigMissing, names.signature)
	}
	id, ts := h.Get(names.id), h.Get(names.timestamp)
	if id == "" || ts == "" {
		return fmt.Errorf("%w: %s and %s are both required", errSigMissing, strings.ToLower(names.id), strings.ToLower(names.timestamp))
	}
	if err := v.fresh(ts); err != nil {
		return err
	}
	var candidates []string
	for _, s := range strings.Fields(strings.Join(sig, " ")) {
		if b64, ok := strings.CutPrefix(s, "v1,"); ok { // other versions (v1a: asymmetric) are not ours
			candidates = append(candidates, b64)
		}
	}
	return v.verifyMAC(candidates, "", base64.StdEncoding.DecodeString, []byte(id+"."+ts+"."), body)
}

func (v *Verifier) verifyStripe(sig string, body []byte) error {
	var t string
	var candidates []string
	for _, part := range strings.Split(sig, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			if t == "" {
				t = val
			}
		case "v1":
			candidates = append(candidates, val)
		}
	}
	if t == "" || len(candidates) == 0 {
		return fmt.Errorf("%w: Stripe-Signature needs t= and v1=", errSigMissing)
	}
	if err := v.fresh(t); err != nil {
		return err
	}
	return v.verifyMAC(candidates, "", hex.DecodeString, []byte(t+"."), body)
}

// verifyMAC reports whether any candidate (after prefix, decoded) is the
// HMAC-SHA256 of signedPrefix+body under any key, in constant time per compare.
func (v *Verifier) verifyMAC(candidates []string, prefix string, decode func(string) ([]byte, error), signedPrefix, body []byte) error {
	var sums [][]byte
	for _, c := range candidates {
		c, ok := strings.CutPrefix(strings.TrimSpace(c), prefix)
		if !ok {
			continue
		}
		got, err := decode(c)
		if err != nil || len(got) != sha256.Size {
			continue
		}
		if sums == nil {
			for _, k := range v.keys {
				m := hmac.New(sha256.New, k)
				m.Write(signedPrefix)
				m.Write(body)
				sums = append(sums, m.Sum(nil))
			}
		}
		for _, s := range sums {
			if hmac.Equal(got, s) {
				return nil
			}
		}
	}
	return errSigMismatch
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
