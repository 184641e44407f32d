// Package client is a retrying http.RoundTripper for Go callers of APIs behind
// idemproxy (or any server honouring Idempotency-Key).
//
//	c := &http.Client{Transport: client.New(http.DefaultTransport)}
//	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
//
// For POST and PATCH it attaches an Idempotency-Key (a random UUIDv4 unless the
// caller set one) that stays the same across the retries of that request, so a
// retry after a lost response is answered with the stored response instead of
// running twice.
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults.
const (
	DefaultMaxAttempts    = 5
	DefaultMaxElapsed     = 30 * time.Second
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultKeyHeader      = "Idempotency-Key"
)

// Option configures a Transport.
type Option func(*Transport)

// WithMaxAttempts bounds the attempts per request, the first included. Default
// DefaultMaxAttempts.
func WithMaxAttempts(n int) Option { return func(t *Transport) { t.maxAttempts = n } }

// WithMaxElapsed bounds the time from the first attempt to the start of the last.
// Default DefaultMaxElapsed. The request's context deadline applies as well.
func WithMaxElapsed(d time.Duration) Option { return func(t *Transport) { t.maxElapsed = d } }

// WithBackoff sets the exponential backoff: the n-th retry waits a random time up
// to min(max, initial·2ⁿ⁻¹) ("full jitter"). A Retry-After from the server is
// honoured instead. Defaults DefaultInitialBackoff, DefaultMaxBackoff.
func WithBackoff(initial, max time.Duration) Option {
	return func(t *Transport) { t.initial, t.max = initial, max }
}

// WithKeyHeader sets the header carrying the key. Default DefaultKeyHeader.
func WithKeyHeader(name string) Option { return func(t *Transport) { t.keyHeader = name } }

// WithMethods sets the methods that get a key and retries. Default POST, PATCH.
// Other methods pass through once, untouched.
func WithMethods(methods ...string) Option {
	return func(t *Transport) {
		t.methods = map[string]bool{}
		for _, m := range methods {
			t.methods[m] = true
		}
	}
}

// WithKeyFunc sets how keys are made. Default NewKey (random UUIDv4).
func WithKeyFunc(fn func() string) Option { return func(t *Transport) { t.newKey = fn } }

// Transport retries idempotent-keyed requests. It is safe for concurrent use.
type Transport struct {
	base        http.RoundTripper
	maxAttempts int
	maxElapsed  time.Duration
	initial     time.Duration
	max         time.Duration
	keyHeader   string
	methods     map[string]bool
	newKey      func() string
}

// New wraps base (nil means http.DefaultTransport).
func New(base http.RoundTripper, opts ...Option) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{
		base:        base,
		maxAttempts: DefaultMaxAttempts,
		maxElapsed:  DefaultMaxElapsed,
		initial:     DefaultInitialBackoff,
		max:         DefaultMaxBackoff,
		keyHeader:   DefaultKeyHeader,
		methods:     map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		newKey:      NewKey,
	}
	for _, o := range opts {
		o(t)
	}
	if t.maxAttempts < 1 {
		t.maxAttempts = 1
	}
	return t
}

// NewKey returns a random UUIDv4.
func NewKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// RoundTrip implements http.RoundTripper. It returns the last response (or error)
// when it gives up; a response it retries is drained and closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.methods[req.Method] {
		return t.base.RoundTrip(req)
	}
	key := req.Header.Get(t.keyHeader)
	if key == "" {
		key = t.newKey()
	}
	// A body that cannot be produced again allows one attempt only.
	hasBody := req.Body != nil && req.Body != http.NoBody
	attempts := t.maxAttempts
	if hasBody && req.GetBody == nil {
		attempts = 1
	}
	ctx := req.Context()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		r := req.Clone(ctx)
		r.Header.Set(t.keyHeader, key)
		if attempt > 1 && hasBody {
			body, err := req.GetBody()
			if err != nil {
				return nil, fmt.Errorf("idempotent retry: re-reading the request body: %w", err)
			}
			r.Body = body
		}
		resp, err := t.base.RoundTrip(r)
		if attempt >= attempts || ctx.Err() != nil {
			return resp, err
		}
		if unknownOutcome(resp) {
			// The first attempt reached the server and its outcome is unknown:
			// the same key would get the same answer, and a new key could run
			// the operation twice. Only the caller (or an operator) can decide.
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			return nil, &OutcomeUnknownError{Key: key, Status: resp.StatusCode, Problem: string(body)}
		}
		delay, retry := t.retryDelay(resp, err, attempt)
		if !retry || time.Since(start)+delay > t.maxElapsed {
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// OutcomeUnknownError is returned, instead of a retry, when the server answers
// that the request with this key was sent upstream and its outcome is unknown
// (problem type urn:idemproxy:problem:outcome-unknown): it may have been executed.
// Retrying with the same key gets the same answer; a new key could run it twice.
type OutcomeUnknownError struct {
	Key     string
	Status  int
	Problem string // the problem body as sent
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("idempotent request with key %q: outcome unknown (%d): it reached the upstream and may have been executed; not retried, since the same key gets the same answer and a new key could run it twice", e.Key, e.Status)
}

// outcomeUnknownType is the problem type of an unknown outcome.
const outcomeUnknownType = "urn:idemproxy:problem:outcome-unknown"

// unknownOutcome reports whether resp is the outcome-unknown answer, in any
// error format: idemproxy names the problem in its Idempotency-Problem header;
// an older one only in a problem+json body.
func unknownOutcome(resp *http.Response) bool {
	if resp == nil || (resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusGatewayTimeout) {
		return false
	}
	if t := resp.Header.Get("Idempotency-Problem"); t != "" {
		return t == outcomeUnknownType
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		return false
	}
	// Peek at the body without consuming it for the caller.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	return bytes.Contains(body, []byte(`"`+outcomeUnknownType+`"`))
}

// retryDelay decides whether an answer is worth another attempt, and after how long.
func (t *Transport) retryDelay(resp *http.Response, err error, attempt int) (time.Duration, bool) {
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return 0, false
		}
		return t.backoff(attempt), true // connection error: the key makes the retry safe
	}
	switch resp.StatusCode {
	case http.StatusConflict:
		// In flight: the server says when to come back. A 409 without
		// Retry-After (e.g. not-replayable) is final.
		if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
			return d, true
		}
		return 0, false
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
			return d, true
		}
		return t.backoff(attempt), true
	}
	return 0, false // success, 4xx (422, 400, …) and other answers are final
}

func (t *Transport) backoff(attempt int) time.Duration {
	ceiling := t.initial << min(attempt-1, 30)
	if ceiling > t.max || ceiling <= 0 {
		ceiling = t.max
	}
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling + 1)
}

// retryAfter parses delta-seconds or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0), true
	}
	return 0, false
}
