package webhook

// Standard Webhooks: the headers a delivery is signed under, its secret, its
// signature and its key.

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

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

// standardSecret is a Standard Webhooks secret's key: the base64 after an
// optional whsec_ prefix. The secret itself is never named in errors.
func standardSecret(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil || len(b) == 0 {
		return nil, errors.New("is not a Standard Webhooks secret (whsec_ and base64)")
	}
	return b, nil
}

// readStandard reads a Standard Webhooks delivery under the header set it uses
// (standardNamesOf): the signature over id.timestamp.body, "v1,<base64>" in a
// space-separated list (other versions, v1a: asymmetric, are not ours).
func readStandard(_ *Verifier, h http.Header) (signed, error) {
	names := standardNamesOf(h)
	sigs, err := signatures(h, names.signature)
	if err != nil {
		return signed{}, err
	}
	id, ts := h.Get(names.id), h.Get(names.timestamp)
	if id == "" || ts == "" {
		return signed{}, fmt.Errorf("%w: %s and %s are both required", errSigMissing, strings.ToLower(names.id), strings.ToLower(names.timestamp))
	}
	macs := decodeMACs(strings.Fields(strings.Join(sigs, " ")), "v1,", base64.StdEncoding.DecodeString)
	return signed{prefix: []byte(id + "." + ts + "."), timestamp: ts, macs: macs}, nil
}
