package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Sign returns the headers a provider would send with body, signed with the
// first secret; id and at are used where the preset signs them (standard: id and
// timestamp; stripe: timestamp) or sends them (github: the delivery id). It is
// what `idemproxy sign` prints, for trying a route by hand; tests of the
// verifier build their signatures independently. It checks no time, so it does
// not read Tolerance.
func (w Webhook) Sign(id string, at time.Time, body []byte) (http.Header, error) {
	w.Tolerance = DefaultTolerance
	v, err := New(w)
	if err != nil {
		return nil, err
	}
	p := v.preset
	if p.SignsID && id == "" {
		return nil, fmt.Errorf("the %s preset signs a %s: give one", p.Name, strings.ToLower(p.ID))
	}
	h := http.Header{}
	if p.ID != "" && id != "" {
		h.Set(p.ID, id)
	}
	signed := func(prefix string) []byte { return mac(v.keys[0], []byte(prefix), body) }
	p.sign(v, id, strconv.FormatInt(at.Unix(), 10), signed, h)
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
				return nil, cache.FieldErrorf("", "webhook_secrets", "%s: the variable is not set or empty", ref)
			}
			out = append(out, v)
		case kind == "file" && arg != "":
			b, err := os.ReadFile(arg)
			if err != nil {
				return nil, cache.FieldErrorf("", "webhook_secrets", "%s: %v", ref, errors.Unwrap(err))
			}
			n := 0
			for _, line := range bytes.Split(b, []byte("\n")) {
				if s := strings.TrimSpace(string(line)); s != "" && !strings.HasPrefix(s, "#") {
					out = append(out, s)
					n++
				}
			}
			if n == 0 {
				return nil, cache.FieldErrorf("", "webhook_secrets", "%s: no secret in the file", ref)
			}
		default:
			return nil, cache.FieldErrorf("", "webhook_secrets", "an entry is neither env:NAME nor file:PATH (a secret itself never goes in the configuration)")
		}
	}
	return out, nil
}
