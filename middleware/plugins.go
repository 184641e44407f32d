package middleware

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"time"
)

// What plugs into the core. The core knows these four small interfaces and its
// own defaults (a key header, RFC 9457 problems); package keysource has the
// other key sources (JSON and form fields, a body digest), package webhook the
// signature presets (a Verifier and the key source each implies), package
// fingerprint the readings of a body (JSON, form, multipart), package errformat the other error formats (Stripe's, a JSON template), and package
// config builds all of them from their configuration strings ("json:/id",
// "stripe", …). Go users may pass their own.

// KeySource finds a request's idempotency key.
type KeySource interface {
	// Key returns the key of r. body is its buffered body when NeedsBody
	// reports true (nil otherwise). It fails with ErrNoKey when r carries no
	// key (then require_key decides: 400, or passed through untracked);
	// with any other error the key is invalid and the error's text is the 400
	// problem's detail.
	Key(r *http.Request, body []byte) (string, error)
	// NeedsBody reports whether the key is read from the body, which the
	// core then reads (bounded) before it looks for the key.
	NeedsBody() bool
	// ID names the source in the store key: the same key from two sources is
	// two records, so a key sent in a header can never claim a key another
	// source would find ("header", "json:/id", …).
	ID() string
	// Describe says what a request must carry, for the missing-key problem:
	// "an Idempotency-Key header".
	Describe() string
}

// ErrNoKey is what a KeySource answers for a request without a key.
var ErrNoKey = errors.New("no idempotency key")

// Verifier authenticates a request before its key is claimed: a webhook
// provider's signature (package webhook). A request that does not verify gets
// 401 and nothing is claimed, stored or forwarded. With a Verifier, a key's
// scope is the route and the signed key alone (the Host and other headers are
// not signed), and the body is left out of the fingerprint (a provider may
// render a redelivery's body anew).
type Verifier interface {
	// Verify reports why r (whose buffered body is body) is not authentic,
	// or nil. The error's text is the 401 problem's detail: it must never
	// quote a secret.
	Verify(r *http.Request, body []byte) error
	// Challenge is the WWW-Authenticate value sent with the 401.
	Challenge() string
	// ID names the scheme in the store key ("standard", "stripe", …).
	ID() string
}

// ErrorFormat renders the answers the core writes itself (400, 409, 422, 503,
// the held outcome-unknown answer). Every such answer also carries
// Idempotency-Problem (the problem's type), Cache-Control: no-store, and the
// request's key when it came in a key header; the format adds its own headers.
// The core's default is ProblemJSON; package errformat has Stripe's shape and
// JSON templates. A gRPC call (isGRPC) is answered in gRPC's shape instead,
// whatever the format: a client of gRPC reads no other (grpc.go).
type ErrorFormat interface {
	// Render returns p's Content-Type, extra headers (or nil) and body.
	// retryAfter is the Retry-After the answer carries, 0 for none.
	Render(p Problem, retryAfter time.Duration) (contentType string, header http.Header, body []byte)
}

// BodyFingerprint reads a request body as its clients mean it, for the
// fingerprint: a client that sends a retry serialised anew (members in another
// order, a new multipart boundary) sends the same parts, and replays. Package
// fingerprint has the JSON (RFC 8785), form and multipart readings; nil means
// the body's bytes, as they are.
type BodyFingerprint interface {
	// Parts calls part once per part of body, in an order that depends on
	// the body's meaning only, with the part's name and a SHA-256 of its
	// canonical form. Two bodies mean the same exactly when their sequences
	// of names and sums are equal. A name is what a mismatch problem shows
	// ("/amount", `form field "x"`, "multipart part 2"; "" for the body as a
	// whole); it never quotes a value. An error means body cannot be read
	// one way only (not the format, ambiguous, beyond a bound): nothing is
	// claimed or forwarded, and its text, which quotes no value, is the 400
	// problem's detail.
	Parts(r *http.Request, body []byte, part func(name string, sum [sha256.Size]byte)) error
	// ID names the reading in the fingerprint ("json", "form", …): two
	// readings never give the same fingerprint.
	ID() string
}
