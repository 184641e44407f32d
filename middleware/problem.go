package middleware

import (
	"net/http"
	"strings"
	"time"
)

// ProblemTypeBase prefixes every problem type URI. The URIs are stable identifiers
// (RFC 9457 §3.1.1); README lists them.
const ProblemTypeBase = "urn:idemproxy:problem:"

// Problem types, one per case a client can meet.
const (
	ProblemMissingKey       = ProblemTypeBase + "missing-key"
	ProblemInvalidKey       = ProblemTypeBase + "invalid-key"
	ProblemBodyTooLarge     = ProblemTypeBase + "body-too-large"
	ProblemBodyUnreadable   = ProblemTypeBase + "body-unreadable"
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
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// OriginalStatus is set on not-replayable problems: the status the first
	// request completed with.
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
	ProblemInFlight:         "Request with this idempotency key is in progress",
	ProblemMismatch:         "Idempotency key reused with a different request",
	ProblemNotReplayable:    "Original response cannot be replayed",
	ProblemStoreUnavailable: "Idempotency store unavailable",
	ProblemInvalidSignature: "Webhook signature not verified",
	ProblemNonCanonicalPath: "Path not in canonical form",
	ProblemInvalidHost:      "Invalid Host",
	ProblemUpgradeRefused:   "Protocol upgrade refused on a request with an idempotency key",
	ProblemOverloaded:       "Request body budget exhausted",
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

// WriteProblem writes p as application/problem+json. retryAfter > 0 adds a
// Retry-After header in whole seconds (at least 1).
func WriteProblem(w http.ResponseWriter, p Problem, retryAfter time.Duration) {
	(&errorFormat{kind: ErrorFormatProblem}).write(w, p, retryAfter, "", "")
}

// WriteProblem writes p in the handler's error_format, echoing the request's key
// (when it came in a valid key header) as Stripe does.
func (h *Handler) WriteProblem(w http.ResponseWriter, r *http.Request, p Problem, retryAfter time.Duration) {
	h.cfg.errorFormat.write(w, p, retryAfter, h.cfg.keySource.name, h.echoKey(r))
}

// echoKey is the key to echo on an answer to r: the key header's, when valid;
// none for a key taken from the body.
func (h *Handler) echoKey(r *http.Request) string {
	if h.cfg.keySource.kind != "header" {
		return ""
	}
	key, err := ParseKey(r.Header.Values(h.cfg.keySource.headerName(r.Header)))
	if err != nil {
		return ""
	}
	return key
}
