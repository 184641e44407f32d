// Package webhooktest signs webhook deliveries the way each provider documents
// it, written apart from the verifier in package webhook so that the tests
// of one do not merely repeat the other.
package webhooktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Published test vectors.
const (
	// Standard Webhooks' reference vector (the specification's libraries test it).
	StandardSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	StandardID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	StandardTimestamp = 1614265330
	StandardBody      = `{"test": 2432232314}`
	StandardSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

	// GitHub's example in "Validating webhook deliveries".
	GitHubSecret    = "It's a Secret to Everybody"
	GitHubBody      = "Hello, World!"
	GitHubSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func mac(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// Standard returns the headers of a Standard Webhooks delivery: the secret's
// base64 part (after whsec_) is the key, the signed content id.timestamp.body.
func Standard(secret, id string, at time.Time, body string) map[string]string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic("webhooktest: not a Standard Webhooks secret")
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	return map[string]string{
		"webhook-id":        id,
		"webhook-timestamp": ts,
		"webhook-signature": "v1," + base64.StdEncoding.EncodeToString(mac(key, id, ".", ts, ".", body)),
	}
}

// Svix returns the headers of a delivery as Svix sends it to endpoints on plans
// without the webhook-* names: svix-id, svix-timestamp and svix-signature,
// signed as Standard Webhooks sign (the same secret, the content
// id.timestamp.body).
func Svix(secret, id string, at time.Time, body string) map[string]string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic("webhooktest: not a Svix secret")
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	return map[string]string{
		"svix-id":        id,
		"svix-timestamp": ts,
		"svix-signature": "v1," + base64.StdEncoding.EncodeToString(mac(key, id, ".", ts, ".", body)),
	}
}

// Stripe returns the Stripe-Signature header of a delivery: t=timestamp, v1 = hex
// HMAC-SHA256 of "timestamp.body" keyed with the endpoint secret as it is.
func Stripe(secret string, at time.Time, body string) map[string]string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return map[string]string{"Stripe-Signature": "t=" + ts + ",v1=" + hex.EncodeToString(mac([]byte(secret), ts, ".", body))}
}

// GitHub returns the headers of a GitHub delivery: X-Hub-Signature-256 is
// "sha256=" and the hex HMAC-SHA256 of the body; X-GitHub-Delivery is not signed.
func GitHub(secret, delivery, body string) map[string]string {
	return map[string]string{
		"X-GitHub-Delivery":   delivery,
		"X-GitHub-Event":      "push",
		"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(mac([]byte(secret), body)),
	}
}

// HMAC returns header: prefix + the HMAC-SHA256 of the body, hex or base64.
func HMAC(secret, header, prefix string, base64Enc bool, body string) map[string]string {
	sum := mac([]byte(secret), body)
	enc := hex.EncodeToString(sum)
	if base64Enc {
		enc = base64.StdEncoding.EncodeToString(sum)
	}
	return map[string]string{header: prefix + enc}
}

// Header turns the headers of a delivery into an http.Header.
func Header(kv map[string]string) http.Header {
	h := http.Header{}
	for k, v := range kv {
		h.Set(k, v)
	}
	return h
}
