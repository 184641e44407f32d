// Package webhook verifies webhook providers' signatures before a delivery's key
// is claimed, and picks each provider's key: Standard Webhooks (and Svix's own
// header names), Stripe, GitHub, and a generic HMAC. A Verifier is a
// middleware.Verifier; its KeySource is the preset's key (key_source: auto).
// Secrets come from references (env:NAME, file:PATH), never from the
// configuration itself, and are never quoted in an error.
package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/keysource"
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
		return nil, fieldErr("webhook_tolerance", "must be positive, got %v", v.Tolerance)
	}
	if len(v.Secrets) == 0 {
		return nil, fieldErr("webhook_secrets", "the %s preset needs at least one secret", v.Preset)
	}
	if v.Preset != HMAC && (v.Header != "" || v.Prefix != "") {
		return nil, fieldErr("webhook_header", "webhook_header and webhook_prefix apply to the hmac preset only; %s has its own header", v.Preset)
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
			return nil, fieldErr("webhook_header", "the hmac preset needs the header that carries the signature, got %q", v.Header)
		}
		if v.Encoding == "" {
			v.Encoding = "hex"
		}
		if v.Encoding != "hex" && v.Encoding != "base64" {
			return nil, fieldErr("webhook_encoding", "%q: want hex or base64", v.Encoding)
		}
		v.header = http.CanonicalHeaderKey(v.Header)
	default:
		return nil, fieldErr("webhook", "%q: want standard, stripe, github or hmac", v.Preset)
	}
	for i, s := range v.Secrets {
		if s == "" {
			return nil, fieldErr("webhook_secrets", "secret %d is empty", i+1)
		}
		key := []byte(s)
		if v.Preset == Standard {
			// The secret is base64 after an optional whsec_ prefix; the HMAC key
			// is the decoded bytes. The secret itself is never named in errors.
			b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
			if err != nil || len(b) == 0 {
				return nil, fieldErr("webhook_secrets", "secret %d is not a Standard Webhooks secret (whsec_ and base64)", i+1)
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

// standardNames are the headers a Standard Webhooks delivery is signed under.
type standardNames struct{ id, timestamp, signature string }

var (
	webhookNames = standardNames{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}
	svixNames    = standardNames{"Svix-Id", "Svix-Timestamp", "Svix-Signature"}
)

// standardNamesOf picks the set a delivery uses: webhook-* when any of them is
// present, else svix-* when any of those is (Svix sends these on plans without
// the webhook-* names). Never a mix: a webhook-id beside a svix-signature is a
// webhook-* delivery without its signature. The verifier and the key read the
// same set.
func standardNamesOf(h http.Header) standardNames {
	for _, n := range [...]string{webhookNames.id, webhookNames.timestamp, webhookNames.signature} {
		if len(h[n]) > 0 {
			return webhookNames
		}
	}
	for _, n := range [...]string{svixNames.id, svixNames.timestamp, svixNames.signature} {
		if len(h[n]) > 0 {
			return svixNames
		}
	}
	return webhookNames
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

// Sign returns the headers a provider would send with body, signed with the
// first secret; id and at are used where the preset signs them (standard: id and
// timestamp; stripe: timestamp). It is what `idemproxy sign` prints, for trying a
// route by hand; tests of the verifier build their signatures independently.
func (w Webhook) Sign(id string, at time.Time, body []byte) (http.Header, error) {
	v, err := New(w)
	if err != nil {
		return nil, err
	}
	mac := func(prefix string) []byte {
		m := hmac.New(sha256.New, v.keys[0])
		m.Write([]byte(prefix))
		m.Write(body)
		return m.Sum(nil)
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	h := http.Header{}
	switch v.Preset {
	case Standard:
		if id == "" {
			return nil, errors.New("the standard preset signs a webhook-id: give one")
		}
		h.Set("Webhook-Id", id)
		h.Set("Webhook-Timestamp", ts)
		h.Set("Webhook-Signature", "v1,"+base64.StdEncoding.EncodeToString(mac(id+"."+ts+".")))
	case Stripe:
		h.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac(ts+".")))
	case GitHub:
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac("")))
		if id != "" {
			h.Set("X-GitHub-Delivery", id)
		}
	case HMAC:
		enc := hex.EncodeToString
		if v.Encoding == "base64" {
			enc = base64.StdEncoding.EncodeToString
		}
		h.Set(v.header, v.Prefix+enc(mac("")))
	}
	return h, nil
}

// LoadSecrets reads webhook secrets from their references: "env:NAME" (the
// variable's value) or "file:PATH" (one secret per line; blank lines and lines
// starting with # are skipped). Secrets never appear in a configuration, and
// errors name the reference, never a secret.
func LoadSecrets(refs []string) ([]string, error) {
	var out []string
	for _, ref := range refs {
		kind, arg, _ := strings.Cut(ref, ":")
		switch {
		case kind == "env" && arg != "":
			v, ok := os.LookupEnv(arg)
			if v = strings.TrimSpace(v); !ok || v == "" {
				return nil, fieldErr("webhook_secrets", "%s: the variable is not set or empty", ref)
			}
			out = append(out, v)
		case kind == "file" && arg != "":
			b, err := os.ReadFile(arg)
			if err != nil {
				return nil, fieldErr("webhook_secrets", "%s: %v", ref, errors.Unwrap(err))
			}
			n := 0
			for _, line := range bytes.Split(b, []byte("\n")) {
				if s := strings.TrimSpace(string(line)); s != "" && !strings.HasPrefix(s, "#") {
					out = append(out, s)
					n++
				}
			}
			if n == 0 {
				return nil, fieldErr("webhook_secrets", "%s: no secret in the file", ref)
			}
		default:
			return nil, fieldErr("webhook_secrets", "an entry is neither env:NAME nor file:PATH (a secret itself never goes in the configuration)")
		}
	}
	return out, nil
}

// Challenge implements middleware.Verifier: the WWW-Authenticate of the 401.
func (v *Verifier) Challenge() string { return `Webhook-Signature header="` + v.header + `"` }

// ID implements middleware.Verifier.
func (v *Verifier) ID() string { return v.Preset }

// KeySource is the preset's key (key_source auto): Standard, the signed id
// (webhook-id, or svix-id under Svix's names); Stripe, the body's /id; GitHub
// and HMAC, a digest of the signed body, the only part of a delivery they sign.
func (v *Verifier) KeySource() middleware.KeySource {
	switch v.Preset {
	case Standard:
		return standardID{}
	case Stripe:
		ks, _ := keysource.NewJSON("/id") // a valid pointer
		return ks
	}
	return keysource.BodyDigest{}
}

// standardID is the Standard Webhooks delivery's signed id, under the header set
// the signature is checked under (standardNamesOf).
type standardID struct{}

func (standardID) Key(r *http.Request, _ []byte) (string, error) {
	values := r.Header.Values(standardNamesOf(r.Header).id)
	if len(values) == 0 {
		return "", middleware.ErrNoKey
	}
	return middleware.ParseKey(values)
}

func (standardID) NeedsBody() bool  { return false }
func (standardID) ID() string       { return "header" }
func (standardID) Describe() string { return "a webhook-id (or svix-id) header" }

// fieldErr is a settings error naming the setting at fault.
func fieldErr(field, format string, args ...any) error {
	return &middleware.SettingsError{Field: field, Err: fmt.Errorf(format, args...)}
}

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
