// Package middleware is idemproxy's handler core: it makes POST and PATCH requests
// that carry an Idempotency-Key run once, and answers their repeats with the stored
// response. It knows nothing of Caddy or of proxying; the reverse proxy and the Caddy
// module are thin adapters around it.
package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
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
	cfg       config
	inProcess bool           // the store never blocks: no per-call timeouts
	holder    cache.Holder   // the store must be held while used; nil for most
	budget    *budget        // body_budget: shared by every Handler of its size
	pending   sync.WaitGroup // responses whose storing is being retried
}

// storeCtx returns the context for one store call: not cancelled by the client
// (an abandoned claim would hold the key for a whole lease), bounded by the store
// timeout unless the store is in-process.
func (h *Handler) storeCtx(parent context.Context) (context.Context, context.CancelFunc) {
	if h.inProcess {
		return parent, noCancel // nothing in the store waits on it
	}
	return context.WithTimeout(context.WithoutCancel(parent), h.cfg.storeTimeout)
}

func noCancel() {}

// New returns a Handler over store.
func New(store cache.Store, opts ...Option) (*Handler, error) {
	if store == nil {
		return nil, errors.New("idempotency: nil store")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.finish(); err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	_, inProcess := store.(cache.InProcess)
	holder, _ := store.(cache.Holder)
	return &Handler{store: store, cfg: cfg, inProcess: inProcess, holder: holder, budget: sharedBudget(cfg.bodyBudget)}, nil
}

// Wrap returns next protected by h.
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
	return h.cfg.trackedByMethod[h.cfg.canonicalMethod(method)]
}

// Handle serves one request. Untracked methods go straight to next. It returns the
// error next returned (after releasing the key), and nil otherwise.
//
// The observer is called once per tracked request: before the response is written
// when the core answers itself (problems, replays), after next returns otherwise.
func (h *Handler) Handle(w http.ResponseWriter, r *http.Request, next Next) error {
	method := h.cfg.canonicalMethod(r.Method)
	if !h.cfg.trackedByMethod[method] {
		return next.ServeHTTP(w, r)
	}
	// The request goes on as the core read it: a tracked method in another
	// case is forwarded in its canonical spelling.
	r.Method = method
	if h.holder != nil {
		defer h.holder.Hold()()
	}
	t := &tracker{h: h, start: time.Now(), ev: Event{Request: r}, hold: bodyHold{b: h.budget}}
	defer t.finish()
	ev := &t.ev

	path, _, err := CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		t.problem(w, OutcomeInvalid, err, NonCanonicalPathProblem(r.URL.EscapedPath(), err), 0)
		return nil
	}
	host, err := CanonicalHost(r.Host)
	if err != nil {
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemInvalidHost, http.StatusBadRequest,
			err.Error()+"; send a host name or an IP literal, with an optional port"), 0)
		return nil
	}

	var body []byte
	if h.cfg.bodyFirst { // a signature to check, or a key in the body
		var ok bool
		if body, ok = h.readBodyOrAnswer(w, r, t); !ok {
			return nil
		}
		if v := h.cfg.verifier; v != nil {
			if err := v.verify(r.Header, body); err != nil {
				w.Header().Set("WWW-Authenticate", `Webhook-Signature header="`+v.header+`"`)
				t.problem(w, OutcomeInvalidSignature, err, newProblem(ProblemInvalidSignature, http.StatusUnauthorized,
					"the webhook signature did not verify ("+err.Error()+"); nothing was executed"), 0)
				return nil
			}
		}
	}
	key, err := h.cfg.keySource.key(r, body)
	switch {
	case errors.Is(err, errNoKey):
		if h.cfg.requireKey {
			h.bodyLeftUnread(w, r, body)
			t.problem(w, OutcomeInvalid, nil, newProblem(ProblemMissingKey, http.StatusBadRequest,
				"this request requires "+h.cfg.keySource.describe()), 0)
			return nil
		}
		ev.Outcome = OutcomeBypass
		return h.passThrough(w, r, next, ev)
	case err != nil:
		h.bodyLeftUnread(w, r, body)
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemInvalidKey, http.StatusBadRequest, err.Error()), 0)
		return nil
	}
	if h.cfg.keySource.kind == "header" {
		t.key = key // echoed on the answers the core writes
	}
	if h.refuseUpgrade(w, r, t) { // upgrade.go
		return nil
	}
	if !h.cfg.bodyFirst {
		var ok bool
		if body, ok = h.readBodyOrAnswer(w, r, t); !ok {
			return nil
		}
	}

	storeKey := h.storeKey(r, host, key)
	ev.KeyHash = storeKey[:12]
	fp := h.fingerprint(r, path, body)
	owner := h.owner(r, host)
	token := newToken()
	var trace []byte
	if h.cfg.traceContext != nil {
		if trace = h.cfg.traceContext(r.Context()); len(trace) > cache.MaxTrace {
			trace = nil
		}
	}
	t0 := time.Now()
	sctx, scancel := h.storeCtx(r.Context())
	rec, loaded, err := h.store.LockOrGet(sctx, storeKey, cache.Lock{Token: token, Fingerprint: fp, Lease: h.cfg.lockTTL, Trace: trace, Owner: owner})
	scancel()
	ev.StoreDuration = time.Since(t0)
	if err != nil {
		// A full store (nothing this client may evict) is refused even under
		// fail_open: a client that can fill the store must not be able to
		// switch the protection off.
		failOpen := h.cfg.failOpen && !errors.Is(err, cache.ErrFull)
		h.cfg.logger.LogAttrs(r.Context(), slog.LevelError, "idempotency store unavailable",
			slog.String("key_hash", ev.KeyHash), slog.Bool("fail_open", failOpen), slog.Any("error", err))
		if failOpen {
			ev.Outcome, ev.Err = OutcomeStoreError, err
			return h.passThrough(w, r, next, ev)
		}
		t.problem(w, OutcomeStoreError, err, newProblem(ProblemStoreUnavailable, http.StatusServiceUnavailable,
			"the request was not executed; retry later with the same key"), h.cfg.retryAfter)
		return nil
	}
	if loaded && h.cfg.wait > 0 && rec.State == cache.StateInFlight && rec.Fingerprint == fp {
		rec, loaded, err = h.waitForFirst(r, storeKey, fp, token, owner)
		if err != nil {
			h.cfg.logger.LogAttrs(r.Context(), slog.LevelError, "idempotency store unavailable while waiting",
				slog.String("key_hash", ev.KeyHash), slog.Any("error", err))
			t.problem(w, OutcomeStoreError, err, newProblem(ProblemStoreUnavailable, http.StatusServiceUnavailable,
				"the request was not executed; retry later with the same key"), h.cfg.retryAfter)
			return nil
		}
	}
	if loaded {
		h.answerDuplicate(w, rec, fp, t)
		return nil
	}
	return h.execute(w, r, next, storeKey, token, fp, trace, ev)
}

// readBodyOrAnswer reads the request body for the fingerprint (and a body key or
// signature), or answers the problem and reports false.
func (h *Handler) readBodyOrAnswer(w http.ResponseWriter, r *http.Request, t *tracker) ([]byte, bool) {
	body, err := h.readBody(w, r, &t.hold)
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
			"the request bodies held in memory reached their budget; the request was not executed, retry later with the same key"), h.cfg.retryAfter)
	case errors.Is(err, errBodyTooLarge):
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("requests with an idempotency key may carry at most %d bytes", h.cfg.maxRequestBody)), 0)
	default:
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyUnreadable, http.StatusBadRequest, "the request body could not be read"), 0)
	}
	return nil, false
}

// tracker carries one request's event and emits it exactly once.
type tracker struct {
	h       *Handler
	start   time.Time
	ev      Event
	emitted bool
	key     string   // the request's key, when it came in a header
	hold    bodyHold // the body budget this request reserved
}

// finish returns the request's body budget and emits its event, when Handle
// returns.
func (t *tracker) finish() {
	t.hold.release()
	t.emit()
}

func (t *tracker) emit() {
	if t.emitted {
		return
	}
	t.emitted = true
	t.ev.Duration = time.Since(t.start)
	if t.h.cfg.observer != nil {
		t.h.cfg.observer(t.ev)
	}
}

// problem emits the outcome, then writes the problem.
func (t *tracker) problem(w http.ResponseWriter, o Outcome, err error, p Problem, retryAfter time.Duration) {
	t.ev.Outcome, t.ev.Status, t.ev.Err = o, p.Status, err
	t.emit()
	t.h.cfg.errorFormat.write(w, p, retryAfter, t.h.cfg.keySource.name, t.key)
}

// answerDuplicate answers a request whose key already has a record.
func (h *Handler) answerDuplicate(w http.ResponseWriter, rec *cache.Record, fp string, t *tracker) {
	t.ev.Origin = rec.Trace
	if rec.Response != nil {
		t.ev.Origin = rec.Response.Trace
	}
	switch {
	case rec.Fingerprint != fp:
		t.problem(w, OutcomeMismatch, nil, newProblem(ProblemMismatch, http.StatusUnprocessableEntity,
			"this idempotency key was already used with a different request (method, path, query or body)"), 0)
	case rec.State != cache.StateCompleted || rec.Response == nil:
		t.problem(w, OutcomeConflict, nil, newProblem(ProblemInFlight, http.StatusConflict,
			"a request with this idempotency key is still being processed; retry later"), h.cfg.retryAfter)
	case rec.Response.Oversize:
		p := newProblem(ProblemNotReplayable, http.StatusConflict, fmt.Sprintf(
			"the request with this idempotency key completed, but its %d-byte response was too large to store; it was not executed again",
			rec.Response.BodySize))
		p.OriginalStatus = rec.Response.Status
		t.problem(w, OutcomeNotReplayable, nil, p, 0)
	default:
		t.ev.Outcome, t.ev.Status = OutcomeReplayed, rec.Response.Status
		t.emit()
		resp := rec.Response
		if resp.Unknown && resp.Header == nil && len(resp.Body) == 0 {
			resp = h.unknownAnswer(resp.Status, resp.Trace) // stored bare in a full store
		}
		h.replayEchoing(w, resp, t.key) // keyecho.go
	}
}

// replay writes a stored response.
func replay(w http.ResponseWriter, resp *cache.Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	h.Del("Transfer-Encoding")
	h.Del("Content-Length")
	if bodyAllowed(resp.Status) && len(resp.Trailer) == 0 {
		h.Set("Content-Length", strconv.Itoa(len(resp.Body))) // trailers need chunked encoding
	}
	for name := range resp.Trailer {
		h.Add("Trailer", name)
	}
	h.Set("Idempotent-Replayed", "true")
	w.WriteHeader(resp.Status)
	if bodyAllowed(resp.Status) && len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
	for name, vals := range resp.Trailer {
		h[name] = vals // announced above: net/http sends them after the body
	}
}
