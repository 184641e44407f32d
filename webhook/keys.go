package webhook

import (
	"net/http"

	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/middleware"
)

// The header sets a Standard Webhooks delivery is signed under: its own, and
// Svix's.
var (
	webhookNames = standardNames{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}
	svixNames    = standardNames{"Svix-Id", "Svix-Timestamp", "Svix-Signature"}
)

// standardNames are the headers a Standard Webhooks delivery is signed under.
type standardNames struct{ id, timestamp, signature string }

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

func (standardID) NeedsBody() bool { return false }

func (standardID) ID() string { return "header" }

func (standardID) Describe() string { return "a webhook-id (or svix-id) header" }
