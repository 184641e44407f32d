package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/status"
)

// Next is the rest of the chain. Its method set is caddyhttp.Handler's, so Caddy's
// next handler fits as is; NextFunc adapts a function.
type Next interface {
	ServeHTTP(http.ResponseWriter, *http.Request) error
}

// NextFunc adapts a function to Next.
type NextFunc func(http.ResponseWriter, *http.Request) error

// ServeHTTP calls f.
func (f NextFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) error { return f(w, r) }

// Handler is the idempotency core. It is safe for concurrent use.
type Handler struct {
	store     cache.Store
	s         Settings
	*compiled                     // what New derived from s
	inProcess bool                // the store never blocks: no per-call timeouts
	deferred  bool                // the store reads a claim's info and owner on demand (cache.DeferredClaims)
	pinned    cache.Pinned        // the store must be pinned while used; nil for most
	replays   cache.ReplayCounter // the store counts replays; nil when it does not
	budget    *budget             // body_budget: shared by every Handler of its size
	pending   sync.WaitGroup      // responses whose storing is being retried
	breaker   *breaker            // the store's, shared by the handlers over it; nil in the process
}

// New returns a Handler over store, with DefaultSettings changed by opts. A
// setting it refuses is a *cache.FieldError naming it.
func New(store cache.Store, opts ...Option) (*Handler, error) {
	if store == nil {
		return nil, errors.New("idempotency: nil store")
	}
	s := DefaultSettings()
	for _, o := range opts {
		o(&s)
	}
	c, err := compile(&s)
	if err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	store, pinned := cache.Unwrap(store) // pinned through a wrapper, used as itself
	_, inProcess := store.(cache.InProcess)
	_, deferred := store.(cache.DeferredClaims)
	replays, _ := store.(cache.ReplayCounter)
	h := &Handler{store: store, s: s, compiled: c, inProcess: inProcess, deferred: deferred, pinned: pinned, replays: replays, budget: sharedBudget(s.BodyBudget)}
	h.breaker = breakerFor(h, store) // breaker.go
	return h, nil
}

// StoreDown returns why h's store is known down (its breaker is open: the
// last claims could not reach it, and tracked requests get 503 without a
// store call until it answers again), or nil. Readiness probes read it.
func (h *Handler) StoreDown() error { return h.breaker.state() }

// Settings returns the settings h runs with.
func (h *Handler) Settings() Settings { return h.s }

// Wrap returns next with its requests tracked by h.
func (h *Handler) Wrap(next http.Handler) http.Handler {
	nf := NextFunc(func(w http.ResponseWriter, r *http.Request) error {
		next.ServeHTTP(w, r)
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = h.Handle(w, r, nf)
	})
}

// Tracked reports whether requests with this method are handled by the core. A
// method is tracked in any case: "post" is POST.
func (h *Handler) Tracked(method string) bool {
	return h.tracked[h.canonicalMethod(method)]
}

// Handle serves one request. Untracked methods go straight to next. It returns the
// error next returned (after releasing the key), and nil otherwise.
//
// The observer is called once per tracked request: before the response is written
// when the core answers itself (problems, replays), after next returns otherwise.
func (h *Handler) Handle(w http.ResponseWriter, r *http.Request, next Next) error {
	return h.handle(w, r, Canonical{}, next)
}

// HandleCanonical is Handle for a request a router has already read into its
// canonical form c (Canonicalize, without error), as the proxy does to pick
// the route: the core takes c's path and Host rather than read r again.
func (h *Handler) HandleCanonical(w http.ResponseWriter, r *http.Request, c Canonical, next Next) error {
	return h.handle(w, r, c, next)
}

// handle serves r; canon is its canonical form, when the caller read it
// (else canon.Path is empty).
func (h *Handler) handle(w http.ResponseWriter, r *http.Request, canon Canonical, next Next) error {
	method := h.canonicalMethod(r.Method)
	if !h.tracked[method] {
		return next.ServeHTTP(w, r)
	}
	// The request goes on as the core read it: a tracked method in another
	// case is forwarded in its canonical spelling.
	r.Method = method
	var cerr error
	if canon.Path == "" { // not read yet
		canon, cerr = Canonicalize(r)
	}
	if h.pinned != nil {
		defer h.pinned.Pin()()
	}
	t := &tracker{h: h, start: time.Now(), ev: Event{Request: r}, reserved: reservation{b: h.budget}, grpc: IsGRPC(r)}
	defer t.finish()
	if errors.Is(cerr, ErrNonCanonicalPath) {
		t.problem(w, OutcomeInvalid, cerr, NonCanonicalPathProblem(r.URL.EscapedPath(), cerr), 0)
		return nil
	} else if cerr != nil {
		t.problem(w, OutcomeInvalid, cerr, newProblem(ProblemInvalidHost, http.StatusBadRequest,
			cerr.Error()+"; send a host name or an IP literal, with an optional port"), 0)
		return nil
	}
	path, host := canon.Path, canon.Host
	key, body, ok := h.keyOf(w, r, t)
	if !ok {
		return nil
	}
	if key == "" {
		t.ev.Outcome = OutcomeBypass
		return h.passThrough(w, r, next, &t.ev)
	}
	fp, err := h.fingerprint(r, path, body)
	if err != nil {
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyMalformed, http.StatusBadRequest,
			err.Error()+"; this route compares bodies by their meaning, so it was not executed"), 0)
		return nil
	}
	// c and t stay on the request's stack: the claim's background work
	// (renewal, a retried store) holds copies.
	c := &claim{h: h, storeKey: h.storeKey(r, host, key), token: newToken(), fp: fp, echo: t.key, grpc: t.grpc}
	c.keyHash = c.storeKey[:12]
	c.req, c.path, c.host, c.seen = r, path, host, t.start // for its request info and owner (ClaimInfo, ClaimOwner)
	if h.s.OnHold != nil {
		c.held = &Held{StoreKey: c.storeKey, Key: key, Request: r, Body: body}
	}
	t.ev.KeyHash = c.keyHash
	if h.s.TraceContext != nil {
		if c.trace = h.s.TraceContext(r.Context()); len(c.trace) > cache.MaxTrace {
			c.trace = nil
		}
	}
	if err := h.breaker.down(); err != nil {
		// Known down: the same answer as a failed claim, without the wait
		// for one. Nothing was claimed; its opening was logged once.
		if h.s.FailOpen {
			t.ev.Outcome, t.ev.Err = OutcomeStoreError, err
			return h.passThrough(w, r, next, &t.ev)
		}
		t.storeUnavailable(w, err)
		return nil
	}
	rec, loaded, err := c.claimOrGet(r, &t.ev)
	if err != nil {
		// A full store (nothing this client may evict) is refused even under
		// fail_open: a client that can fill the store must not be able to
		// switch the protection off.
		c.undo(r.Context()) // the store may have made the claim: nothing is sent under it
		failOpen := h.s.FailOpen && !errors.Is(err, cache.ErrFull)
		h.logger.LogAttrs(r.Context(), slog.LevelError, "idempotency store unavailable",
			slog.String("key_hash", c.keyHash), slog.Bool("fail_open", failOpen), slog.Any("error", err))
		if failOpen {
			t.ev.Outcome, t.ev.Err = OutcomeStoreError, err
			return h.passThrough(w, r, next, &t.ev)
		}
		t.storeUnavailable(w, err)
		return nil
	}
	if loaded && h.s.Wait > 0 && rec.State == cache.StateInFlight && rec.Fingerprint == c.fp {
		// Never failed open: the first request may still run.
		if rec, loaded, err = c.waitForFirst(r, rec.CreatedAt); err != nil {
			c.undo(r.Context()) // a claim of the wait's may have been made
			h.logger.LogAttrs(r.Context(), slog.LevelError, "idempotency store unavailable while waiting",
				slog.String("key_hash", c.keyHash), slog.Any("error", err))
			t.storeUnavailable(w, err)
			return nil
		}
	}
	if loaded {
		if rec.Found {
			h.lapsed(r, c, key, body, rec) // unknown.go
			t.ev.Outcome, t.ev.Err = OutcomeUnknown, errClaimLapsed
		}
		h.answerDuplicate(w, r, rec, c.fp, c.storeKey, t)
		return nil
	}
	defer t.adopt(&c.ev) // also when next panics
	return c.run(w, r, next)
}

// keyOf finds r's key, reading its body (before the key when the key or a
// signature is in it). An empty key with ok means r passes through untracked:
// it carries no key and none is required, or it is a gRPC stream (t.ev.Err
// says so). !ok means r was answered (a problem).
func (h *Handler) keyOf(w http.ResponseWriter, r *http.Request, t *tracker) (key string, body []byte, ok bool) {
	// A gRPC call is read message by message (grpcbody.go); a signed
	// webhook's body is read whole, as its signature covers it.
	framed := t.grpc && h.s.Verifier == nil
	if h.bodyFirst { // a signature to check, or a key in the body
		if body, ok = h.readBodyOrAnswer(w, r, t, framed); !ok {
			return "", nil, false
		}
		if v := h.s.Verifier; v != nil {
			if err := v.Verify(r, body); err != nil {
				w.Header().Set("WWW-Authenticate", v.Challenge())
				t.problem(w, OutcomeInvalidSignature, err, newProblem(ProblemInvalidSignature, http.StatusUnauthorized,
					"the webhook signature did not verify ("+err.Error()+"); nothing was executed"), 0)
				return "", nil, false
			}
		}
	}
	key, err := h.keySource.Key(r, body)
	switch {
	case errors.Is(err, ErrNoKey):
		if h.s.RequireKey {
			h.bodyLeftUnread(w, r, body)
			t.problem(w, OutcomeInvalid, nil, newProblem(ProblemMissingKey, http.StatusBadRequest,
				"this request requires "+h.keySource.Describe()), 0)
			return "", nil, false
		}
		return "", body, true
	case err == nil && len(key) < h.s.MinKeyLength:
		err = fmt.Errorf("the idempotency key is shorter than %d characters", h.s.MinKeyLength)
		fallthrough
	case err != nil:
		h.bodyLeftUnread(w, r, body)
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemInvalidKey, http.StatusBadRequest, err.Error()), 0)
		return "", nil, false
	}
	if h.keyHeader != "" {
		t.key = key // echoed on the answers the core writes
	}
	if h.refuseUpgrade(w, r, t) { // below
		return "", nil, false
	}
	if !h.bodyFirst {
		if body, ok = h.readBodyOrAnswer(w, r, t, framed); !ok {
			return "", nil, false
		}
	}
	if framed {
		verdict, err := h.awaitEnd(w, r, h.bodyFirst, &t.reserved) // grpcbody.go
		switch {
		case verdict == bodyMalformed:
			t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyMalformed, http.StatusBadRequest, err.Error()+"; nothing was executed"), 0)
			return "", nil, false
		case errors.Is(err, errOverloaded):
			t.problem(w, OutcomeOverloaded, err, newProblem(ProblemOverloaded, http.StatusServiceUnavailable,
				"the request bodies held in memory reached their budget; the request was not executed, retry later with the same key"), h.s.RetryAfter)
			return "", nil, false
		case errors.Is(err, errBodyTooLarge):
			t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("requests with an idempotency key may carry at most %d bytes", h.s.MaxRequestBody)), 0)
			return "", nil, false
		case err != nil:
			t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyUnreadable, http.StatusBadRequest, "the request body could not be read"), 0)
			return "", nil, false
		case verdict == bodyStream:
			t.reserved.release() // its first messages are on their way upstream
			t.ev.Err = errStream
			return "", nil, true
		}
	}
	return key, body, true
}

// readBodyOrAnswer reads the request body for the fingerprint (and a body key or
// signature), or answers the problem and reports false. framed reads a gRPC
// call's first message only (grpcbody.go).
func (h *Handler) readBodyOrAnswer(w http.ResponseWriter, r *http.Request, t *tracker, framed bool) (body []byte, ok bool) {
	var err error
	if framed {
		body, _, err = h.readFirstMessage(w, r, &t.reserved)
	} else {
		body, err = h.readBody(w, r, &t.reserved)
	}
	if err == nil {
		return body, true
	}
	if r.ProtoMajor == 1 {
		// The body was not read to its end: the connection closes after the
		// answer (by body_read_timeout at the latest, see readBody) rather than
		// wait for the rest of it. HTTP/2 ends the stream instead.
		w.Header().Set("Connection", "close")
	}
	switch {
	case errors.Is(err, errOverloaded):
		t.problem(w, OutcomeOverloaded, err, newProblem(ProblemOverloaded, http.StatusServiceUnavailable,
			"the request bodies held in memory reached their budget; the request was not executed, retry later with the same key"), h.s.RetryAfter)
	case errors.Is(err, errBodyTooLarge):
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("requests with an idempotency key may carry at most %d bytes", h.s.MaxRequestBody)), 0)
	default:
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyUnreadable, http.StatusBadRequest, "the request body could not be read"), 0)
	}
	return nil, false
}

// tracker carries one request's event and emits it exactly once.
type tracker struct {
	h        *Handler
	start    time.Time
	ev       Event
	emitted  bool
	key      string      // the request's key, when it came in a header
	reserved reservation // the body budget this request reserved
	grpc     bool        // a gRPC call (isGRPC): answered in gRPC's shape
}

// storeUnavailable answers 503: the store failed, nothing was executed.
func (t *tracker) storeUnavailable(w http.ResponseWriter, err error) {
	t.problem(w, OutcomeStoreError, err, newProblem(ProblemStoreUnavailable, http.StatusServiceUnavailable,
		"the request was not executed; retry later with the same key"), t.h.s.RetryAfter)
}

// adopt takes how a first execution ended into the request's event.
func (t *tracker) adopt(ev *Event) {
	t.ev.Outcome, t.ev.Status, t.ev.Err = ev.Outcome, ev.Status, ev.Err
}

// finish returns the request's body budget and emits its event, when Handle
// returns.
func (t *tracker) finish() {
	t.reserved.release()
	t.emit()
}

func (t *tracker) emit() {
	if t.emitted {
		return
	}
	t.emitted = true
	t.ev.Duration = time.Since(t.start)
	if t.h.s.Observer != nil {
		t.h.s.Observer(t.ev)
	}
}

// problem emits the outcome, then writes the problem.
func (t *tracker) problem(w http.ResponseWriter, o Outcome, err error, p Problem, retryAfter time.Duration) {
	t.ev.Outcome, t.ev.Status, t.ev.Err = o, p.Status, err
	t.emit()
	t.h.writeProblem(w, p, retryAfter, t.key, t.grpc)
}

// errSwitched: a first execution switched protocols or took the connection over.
var errSwitched = errors.New("the first execution switched protocols (101) or took the connection over: no answer to store, and it may have acted")

// asksUpgrade reports whether a request asks to switch protocols: it carries an
// Upgrade header, or a Connection header naming upgrade (RFC 9110 §7.8).
func asksUpgrade(h http.Header) bool {
	if len(h["Upgrade"]) > 0 {
		return true
	}
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// refuseUpgrade answers 400 upgrade-refused to a request with a key that asks to
// switch protocols, and reports whether it did. A switched connection leaves no
// answer to store and replay, while the upstream may have acted on the request:
// every retry would run it again. So it is refused before anything is claimed or
// forwarded.
func (h *Handler) refuseUpgrade(w http.ResponseWriter, r *http.Request, t *tracker) bool {
	if !asksUpgrade(r.Header) {
		return false
	}
	t.problem(w, OutcomeInvalid, nil, newProblem(ProblemUpgradeRefused, http.StatusBadRequest,
		"a request with an idempotency key must not ask to switch protocols (Upgrade): a switched connection leaves no answer to replay; nothing was executed"), 0)
	return true
}

// passThrough calls next untracked, noting the status for the observer.
func (h *Handler) passThrough(w http.ResponseWriter, r *http.Request, next Next, ev *Event) error {
	sw := &status.Writer{ResponseWriter: w}
	forwardable(r) // body.go
	err := next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), runningKey{}, ev.Outcome)))
	ev.Status = sw.Status
	if err == nil {
		ev.Status = sw.Final()
	}
	if err != nil && ev.Err == nil {
		ev.Err = err
	}
	return err
}

// runningKey marks the context of a request the core passed to next with
// how it did (Running): outcomeFirst, or the outcome of a pass-through.
type runningKey struct{}

// outcomeFirst marks a first execution in runningKey.
const outcomeFirst Outcome = "first"

// Running says, inside next, how the core passed r on: first for a first
// execution (the request that claimed its key, whose response the core
// records and stores when its status is one of store_statuses); else pass,
// the outcome of a request passed through untracked (OutcomeBypass: no key
// and none required; OutcomeStoreError: the store failed under fail_open).
// Both are zero for a request that did not come through the core.
func Running(r *http.Request) (first bool, pass Outcome) {
	o, _ := r.Context().Value(runningKey{}).(Outcome)
	if o == outcomeFirst {
		return true, ""
	}
	return false, o
}
