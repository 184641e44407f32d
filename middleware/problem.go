package middleware

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProblemTypeBase prefixes every problem type URI. The URIs are stable identifiers
// (RFC 9457 §3.1.1); docs/clients.md lists them.
const ProblemTypeBase = "urn:idemproxy:problem:"

// Problem types, one per case a client can meet.
const (
	ProblemMissingKey       = ProblemTypeBase + "missing-key"
	ProblemInvalidKey       = ProblemTypeBase + "invalid-key"
	ProblemBodyTooLarge     = ProblemTypeBase + "body-too-large"
	ProblemBodyUnreadable   = ProblemTypeBase + "body-unreadable"
	ProblemBodyMalformed    = ProblemTypeBase + "body-malformed"
	ProblemInFlight         = ProblemTypeBase + "in-flight"
	ProblemMismatch         = ProblemTypeBase + "mismatch"
	ProblemNotReplayable    = ProblemTypeBase + "not-replayable"
	ProblemStoreUnavailable = ProblemTypeBase + "store-unavailable"
	ProblemOutcomeUnknown   = ProblemTypeBase + "outcome-unknown"
	ProblemInvalidSignature = ProblemTypeBase + "invalid-signature"
	ProblemNonCanonicalPath = ProblemTypeBase + "non-canonical-path"
	ProblemInvalidHost      = ProblemTypeBase + "invalid-host"
	ProblemUpgradeRefused   = ProblemTypeBase + "upgrade-refused"
	ProblemOverloaded       = ProblemTypeBase + "overloaded"
	ProblemNotAcceptable    = ProblemTypeBase + "not-acceptable"
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// OriginalStatus is set on not-replayable and not-acceptable problems: the
	// status the first request completed with.
	OriginalStatus int `json:"original_status,omitempty"`
	// Retryable says the same request may be sent again with the same key and
	// get another answer (nothing ran, or it still runs), as Stripe-Should-Retry
	// tells Stripe's SDKs. Not part of the problem body.
	Retryable bool `json:"-"`
}

var problemTitles = map[string]string{
	ProblemOutcomeUnknown:   "Outcome unknown",
	ProblemMissingKey:       "Idempotency key required",
	ProblemInvalidKey:       "Invalid idempotency key",
	ProblemBodyTooLarge:     "Request body too large",
	ProblemBodyUnreadable:   "Request body could not be read",
	ProblemBodyMalformed:    "Request body not readable in the route's format",
	ProblemInFlight:         "Request with this idempotency key is in progress",
	ProblemMismatch:         "Idempotency key reused with a different request",
	ProblemNotReplayable:    "Original response cannot be replayed",
	ProblemStoreUnavailable: "Idempotency store unavailable",
	ProblemInvalidSignature: "Webhook signature not verified",
	ProblemNonCanonicalPath: "Path not in canonical form",
	ProblemInvalidHost:      "Invalid Host",
	ProblemUpgradeRefused:   "Protocol upgrade refused on a request with an idempotency key",
	ProblemOverloaded:       "Request body budget exhausted",
	ProblemNotAcceptable:    "Stored response not in an encoding this request accepts",
}

// NonCanonicalPathProblem is the 400 answer to a request whose escaped path
// could not be read one way only (err from CanonicalPath).
func NonCanonicalPathProblem(escapedPath string, err error) Problem {
	detail := err.Error() + "; upstreams resolve such paths differently, so it was not forwarded"
	if clean := suggestPath(escapedPath); clean != "" && clean != escapedPath {
		detail += "; send it as " + clean
	}
	return newProblem(ProblemNonCanonicalPath, http.StatusBadRequest, detail)
}

// suggestPath is p with its dot and empty segments resolved and ;parameters
// kept, when that is a canonical path; "" otherwise.
func suggestPath(p string) string {
	if p == "" || p[0] != '/' {
		return ""
	}
	var out []string
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		name, _, _ := strings.Cut(seg, ";")
		switch strings.ToLower(name) {
		case "", ".", "%2e":
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "..", ".%2e", "%2e.", "%2e%2e":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	s := "/" + strings.Join(out, "/")
	if _, _, err := CanonicalPath(s); err != nil {
		return ""
	}
	return s
}

func newProblem(typ string, status int, detail string) Problem {
	return Problem{Type: typ, Title: problemTitles[typ], Status: status, Detail: detail,
		Retryable: typ == ProblemInFlight || typ == ProblemStoreUnavailable || typ == ProblemOverloaded}
}

// ProblemJSON is RFC 9457 application/problem+json: the core's default
// ErrorFormat.
type ProblemJSON struct{}

// Render implements ErrorFormat.
func (ProblemJSON) Render(p Problem, _ time.Duration) (string, http.Header, []byte) {
	b, err := json.Marshal(p)
	if err != nil { // cannot happen: the struct holds only strings and ints
		b = []byte(`{"type":"about:blank","status":500}`)
	}
	return "application/problem+json", nil, b
}

// Code is the problem type's short name with underscores: in_flight, mismatch.
func (p Problem) Code() string {
	return strings.ReplaceAll(strings.TrimPrefix(p.Type, ProblemTypeBase), "-", "_")
}

// ProblemHeader names, on every answer the core writes itself (and a stored
// outcome-unknown answer), the problem type, whatever the body's format: clients
// branch on it without parsing the body.
const ProblemHeader = "Idempotency-Problem"

// RetrySeconds is d in whole seconds, rounded up (0 for none): the Retry-After
// value.
func RetrySeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// WriteProblem writes p in the handler's error format, echoing the request's key
// (when it came in a valid key header) as Stripe does; to a gRPC call
// (isGRPC), in gRPC's shape.
func (h *Handler) WriteProblem(w http.ResponseWriter, r *http.Request, p Problem, retryAfter time.Duration) {
	h.writeProblem(w, p, retryAfter, h.echoKey(r), IsGRPC(r))
}

// writeProblem writes p, an answer the core makes itself: in the handler's
// error format, or to a gRPC call in gRPC's shape (grpcProblem); key, when not
// empty, is echoed in the key header. retryAfter > 0 adds a Retry-After in
// whole seconds (at least 1).
func (h *Handler) writeProblem(w http.ResponseWriter, p Problem, retryAfter time.Duration, key string, grpc bool) {
	hdr := w.Header()
	status, body := http.StatusOK, []byte(nil)
	if grpc {
		grpcProblem(hdr, p, retryAfter)
	} else {
		ct, extra, b := h.errorFormat.Render(p, retryAfter)
		for k, v := range extra {
			hdr[k] = v
		}
		hdr.Set("Content-Type", ct)
		hdr.Set("Content-Length", strconv.Itoa(len(b)))
		status, body = p.Status, b
	}
	hdr.Set("Cache-Control", "no-store")
	hdr.Set(ProblemHeader, p.Type)
	hdr.Del("Transfer-Encoding")
	if key != "" && h.keyHeader != "" {
		hdr.Set(h.keyHeader, key)
	}
	if retryAfter > 0 {
		hdr.Set("Retry-After", strconv.Itoa(RetrySeconds(retryAfter)))
	}
	w.WriteHeader(status)
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
}

// echoKey is the key to echo on an answer to r: the key header's, when valid;
// none for a key taken from elsewhere.
func (h *Handler) echoKey(r *http.Request) string {
	if h.keyHeader == "" {
		return ""
	}
	key, err := ParseKey(r.Header.Values(h.keyHeader))
	if err != nil {
		return ""
	}
	return key
}
