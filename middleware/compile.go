package middleware

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// compiled is what New derives from Settings once: lookups, canonical names,
// and the plug-ins' defaults.
type compiled struct {
	tracked     map[string]bool
	scope       []scopePart // ScopeHeaders, parsed (header names canonical)
	fpHeaders   []string    // FingerprintHeaders, canonical
	ignored     map[string]bool
	keySource   KeySource
	keySourceID string // the key source (and the verifier) as the store key names them
	keyHeader   string // the header a key is echoed in; "" when the key source is not a header
	legacyScope bool   // store keys keep the first derivation (see writeScope)
	bodyFirst   bool   // the body is read before the key: a signature, or a key in it
	errorFormat ErrorFormat
	logger      *slog.Logger
	// lapseHold is how long a claim that lapses is held as an unknown
	// outcome (cache.Claim.Hold): unknown_hold under the hold policy, none
	// when a lapsed claim is released (unknown_outcome release, in_flight_only).
	lapseHold time.Duration
}

// scopePart is one entry of the scope: a request header, or one cookie.
type scopePart struct {
	name   string
	cookie bool
}

func compile(s *Settings) (*compiled, error) {
	c := &compiled{tracked: map[string]bool{}, ignored: map[string]bool{}}
	if s.UnknownOutcome != UnknownRelease && !s.InFlightOnly {
		c.lapseHold = s.UnknownHold
	}
	if len(s.Methods) == 0 {
		return nil, settingErr("methods", "no tracked methods")
	}
	for _, m := range s.Methods {
		if !validToken(m) || strings.ToUpper(m) != m {
			return nil, settingErr("methods", "%q is not an upper-case HTTP method token%s", m, methodHint(m))
		}
		c.tracked[m] = true
	}
	for _, hs := range []struct {
		field string
		names []string
	}{{"key_header", []string{s.KeyHeader}}, {"fingerprint_headers", s.FingerprintHeaders}, {"ignore_headers", s.IgnoreHeaders}} {
		for _, h := range hs.names {
			if !validToken(h) {
				return nil, settingErr(hs.field, "header name %q is not valid", h)
			}
		}
	}
	for _, h := range s.ScopeHeaders {
		if name, cookie, ok := strings.Cut(h, ":"); ok {
			if !strings.EqualFold(name, "Cookie") || !validToken(cookie) {
				return nil, settingErr("scope_headers", "%q: want a header name, or Cookie:NAME for one cookie", h)
			}
			c.scope = append(c.scope, scopePart{name: cookie, cookie: true})
		} else if !validToken(h) {
			return nil, settingErr("scope_headers", "header name %q is not valid", h)
		} else {
			c.scope = append(c.scope, scopePart{name: http.CanonicalHeaderKey(h)})
		}
	}
	for _, h := range s.FingerprintHeaders {
		c.fpHeaders = append(c.fpHeaders, http.CanonicalHeaderKey(h))
	}
	for _, h := range s.IgnoreHeaders {
		c.ignored[http.CanonicalHeaderKey(h)] = true
	}
	c.keySource = s.KeySource
	if c.keySource == nil {
		c.keySource = HeaderKey{Name: http.CanonicalHeaderKey(s.KeyHeader)}
	}
	if hk, ok := c.keySource.(HeaderKey); ok {
		c.keyHeader = hk.Name
	}
	c.keySourceID = c.keySource.ID()
	if s.Verifier != nil {
		c.keySourceID = s.Verifier.ID() + "/" + c.keySourceID
	}
	c.legacyScope = s.Verifier == nil && c.keyHeader != "" && s.KeyNamespace == "" && s.ScopeHost
	c.bodyFirst = s.Verifier != nil || c.keySource.NeedsBody()
	c.errorFormat = s.ErrorFormat
	if c.errorFormat == nil {
		c.errorFormat = ProblemJSON{}
	}
	c.logger = s.Logger
	if c.logger == nil {
		c.logger = slog.Default()
	}
	switch {
	case s.TTL <= 0:
		return nil, settingErr("ttl", "must be positive, got %v", s.TTL)
	case s.ClaimTTL < 3*time.Millisecond:
		return nil, settingErr("lock_ttl", "must be at least 3ms, got %v", s.ClaimTTL)
	case s.MinKeyLength < 1 || s.MinKeyLength > MaxKeyLength:
		return nil, settingErr("min_key_length", "must be 1 to %d characters, got %d", MaxKeyLength, s.MinKeyLength)
	case s.MaxRequestBody < 0:
		return nil, settingErr("max_request_body", "must not be negative, got %d", s.MaxRequestBody)
	case s.BodyBudget < max(s.MaxRequestBody, 1):
		return nil, settingErr("body_budget", "must be at least max_request_body (%d bytes) so that one body of the largest size fits, got %d", s.MaxRequestBody, s.BodyBudget)
	case s.BodyReadTimeout < 0:
		return nil, settingErr("body_read_timeout", "must not be negative, got %v", s.BodyReadTimeout)
	case s.MaxBody < 0:
		return nil, settingErr("max_body", "must not be negative, got %d", s.MaxBody)
	case s.HandlerTimeout < 0:
		return nil, settingErr("handler_timeout", "must not be negative, got %v", s.HandlerTimeout)
	case s.UnknownOutcome != UnknownHold && s.UnknownOutcome != UnknownRelease:
		return nil, settingErr("unknown_outcome", "%q: want hold or release", s.UnknownOutcome)
	case s.UnknownHold <= 0:
		return nil, settingErr("unknown_hold", "must be positive, got %v", s.UnknownHold)
	case s.CompleteRetry <= 0:
		return nil, settingErr("complete_retry", "must be positive, got %v", s.CompleteRetry)
	case s.StoreTimeout <= 0:
		return nil, settingErr("store_timeout", "must be positive, got %v", s.StoreTimeout)
	case s.RetryAfter < 0:
		return nil, settingErr("retry_after", "must not be negative, got %v", s.RetryAfter)
	case s.Wait < 0:
		return nil, settingErr("wait", "must not be negative, got %v", s.Wait)
	case s.WaitPoll <= 0:
		return nil, settingErr("wait_poll", "must be positive, got %v", s.WaitPoll)
	case s.Wait > 0 && s.InFlightOnly:
		return nil, settingErr("wait", "does not combine with in_flight_only: with no stored result, a waiter would run the request again")
	case s.StoreStatuses.Empty():
		return nil, settingErr("store_statuses", "no status is stored")
	case s.BodyFingerprint != nil && s.Verifier != nil:
		return nil, settingErr("fingerprint", "a webhook route leaves its body out of the fingerprint (a provider may render a redelivery anew); use bytes")
	case s.BodyFingerprint != nil && s.FingerprintFunc != nil:
		return nil, settingErr("fingerprint", "does not combine with a FingerprintFunc, which replaces the whole fingerprint")
	}
	return c, nil
}

// validToken reports whether s is an RFC 9110 token (header names, methods).
var validToken = httpguts.ValidHeaderFieldName

// methodHint suggests the upper-case spelling of a lower-case method.
func methodHint(m string) string {
	if u := strings.ToUpper(m); u != m && validToken(m) {
		return fmt.Sprintf(" (write methods in upper case, %s; requests match it in any case)", u)
	}
	return ""
}
