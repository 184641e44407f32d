package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/middleware"
)

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
				return nil, middleware.SettingsErrorf("webhook_secrets", "%s: the variable is not set or empty", ref)
			}
			out = append(out, v)
		case kind == "file" && arg != "":
			b, err := os.ReadFile(arg)
			if err != nil {
				return nil, middleware.SettingsErrorf("webhook_secrets", "%s: %v", ref, errors.Unwrap(err))
			}
			n := 0
			for _, line := range bytes.Split(b, []byte("\n")) {
				if s := strings.TrimSpace(string(line)); s != "" && !strings.HasPrefix(s, "#") {
					out = append(out, s)
					n++
				}
			}
			if n == 0 {
				return nil, middleware.SettingsErrorf("webhook_secrets", "%s: no secret in the file", ref)
			}
		default:
			return nil, middleware.SettingsErrorf("webhook_secrets", "an entry is neither env:NAME nor file:PATH (a secret itself never goes in the configuration)")
		}
	}
	return out, nil
}
