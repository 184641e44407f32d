// Package middleware is idemproxy's handler core: it makes POST and PATCH requests
// that carry an Idempotency-Key run once, and answers their repeats with the stored
// response. It knows nothing of Caddy or of proxying; the reverse proxy and the Caddy
// module are thin adapters around it.
package middleware

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	return &Handler{store: store, cfg: cfg, inProcess: inProcess}, nil
}

// Store returns the handler's store.
func (h *Handler) Store() cache.Store { return h.store }

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

// Tracked reports whether requests with this method are handled by the core.
func (h *Handler) Tracked(method string) bool { return h.cfg.trackedByMethod[method] }

// Handle serves one request. Untracked methods go straight to next. It returns the
// error next returned (after releasing the key), and nil otherwise.
//
// The observer is called once per tracked request: before the response is written
// when the core answers itself (problems, replays), after next returns otherwise.
func (h *Handler) Handle(w http.ResponseWriter, r *http.Request, next Next) error {
	if !h.cfg.trackedByMethod[r.Method] {
		return next.ServeHTTP(w, r)
	}
	t := &tracker{h: h, start: time.Now(), ev: Event{Request: r}}
	defer t.emit()
	ev := &t.ev

	values := r.Header.Values(h.cfg.keyHeader)
	if len(values) == 0 {
		if h.cfg.requireKey {
			t.problem(w, OutcomeInvalid, nil, newProblem(ProblemMissingKey, http.StatusBadRequest,
				"this request requires an "+h.cfg.keyHeader+" header"), 0)
			return nil
		}
		ev.Outcome = OutcomeBypass
		return h.passThrough(w, r, next, ev)
	}
	key, err := ParseKey(values)
	if err != nil {
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemInvalidKey, http.StatusBadRequest, err.Error()), 0)
		return nil
	}
	body, err := h.readBody(r)
	if errors.Is(err, errBodyTooLarge) {
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("requests with an idempotency key may carry at most %d bytes", h.cfg.maxRequestBody)), 0)
		return nil
	} else if err != nil {
		t.problem(w, OutcomeInvalid, err, newProblem(ProblemBodyUnreadable, http.StatusBadRequest, "the request body could not be read"), 0)
		return nil
	}

	storeKey := h.StoreKey(r, key)
	ev.KeyHash = storeKey[:12]
	fp := h.fingerprint(r, body)
	token := newToken()
	t0 := time.Now()
	sctx, scancel := h.storeCtx(r.Context())
	rec, loaded, err := h.store.LockOrGet(sctx, storeKey, cache.Lock{Token: token, Fingerprint: fp, Lease: h.cfg.lockTTL})
	scancel()
	ev.StoreDuration = time.Since(t0)
	if err != nil {
		h.cfg.logger.LogAttrs(r.Context(), slog.LevelError, "idempotency store unavailable",
			slog.String("key_hash", ev.KeyHash), slog.Bool("fail_open", h.cfg.failOpen), slog.Any("error", err))
		if h.cfg.failOpen {
			ev.Outcome, ev.Err = OutcomeStoreError, err
			return h.passThrough(w, r, next, ev)
		}
		t.problem(w, OutcomeStoreError, err, newProblem(ProblemStoreUnavailable, http.StatusServiceUnavailable,
			"the request was not executed; retry later with the same key"), h.cfg.retryAfter)
		return nil
	}
	if loaded && h.cfg.wait > 0 && rec.State == cache.StateInFlight && rec.Fingerprint == fp {
		rec, loaded, err = h.waitForFirst(r, storeKey, fp, token)
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
	return h.execute(w, r, next, storeKey, token, ev)
}

// waitForFirst waits, up to the configured wait, for the in-flight request holding
// key to finish. It returns the record as last read (loaded=true), or loaded=false
// when this request claimed the key itself (the first one was released).
func (h *Handler) waitForFirst(r *http.Request, key, fp, token string) (*cache.Record, bool, error) {
	deadline := time.NewTimer(h.cfg.wait)
	defer deadline.Stop()
	notifier, _ := h.store.(cache.Notifier)
	for {
		var changed <-chan struct{}
		cancel := func() {}
		if notifier != nil {
			changed, cancel = notifier.Subscribe(key)
		}
		// Read after subscribing: a change in between still wakes us.
		sctx, scancel := h.storeCtx(r.Context())
		rec, loaded, err := h.store.LockOrGet(sctx, key, cache.Lock{Token: token, Fingerprint: fp, Lease: h.cfg.lockTTL})
		scancel()
		if err != nil || !loaded || rec.State != cache.StateInFlight || rec.Fingerprint != fp {
			cancel()
			return rec, loaded, err
		}
		poll := time.NewTimer(h.cfg.waitPoll)
		select {
		case <-changed:
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			cancel()
			return rec, true, nil // still in flight: 409
		case <-r.Context().Done():
			poll.Stop()
			cancel()
			return rec, true, nil // the client left
		}
		poll.Stop()
		cancel()
	}
}

// tracker carries one request's event and emits it exactly once.
type tracker struct {
	h       *Handler
	start   time.Time
	ev      Event
	emitted bool
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
	WriteProblem(w, p, retryAfter)
}

// answerDuplicate answers a request whose key already has a record.
func (h *Handler) answerDuplicate(w http.ResponseWriter, rec *cache.Record, fp string, t *tracker) {
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
		replay(w, rec.Response)
	}
}

// replay writes a stored response.
func replay(w http.ResponseWriter, resp *cache.Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	h.Del("Transfer-Encoding")
	if bodyAllowed(resp.Status) {
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	} else {
		h.Del("Content-Length")
	}
	h.Set("Idempotent-Replayed", "true")
	w.WriteHeader(resp.Status)
	if bodyAllowed(resp.Status) && len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}

// execute runs the first request under the lock and stores or releases its outcome.
func (h *Handler) execute(w http.ResponseWriter, r *http.Request, next Next, key, token string, ev *Event) (err error) {
	// Detach from the client: a hang-up must not cancel the work whose result the
	// client's retry will ask for. The handler timeout bounds it instead.
	ctx := context.WithoutCancel(r.Context())
	cancel := context.CancelFunc(func() {})
	if h.cfg.handlerTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, h.cfg.handlerTimeout)
	}
	defer cancel()

	renew := h.startRenewal(ctx, key, token, ev.KeyHash)
	rw := &recorder{w: w, cfg: &h.cfg}
	returned := false
	defer func() {
		if returned {
			return
		}
		p := recover() // next panicked: release the key so a retry runs, then re-raise
		renew.stop()
		h.release(ctx, key, token, ev.KeyHash)
		ev.Outcome, ev.Status = OutcomeNotStored, rw.status
		if p == nil {
			return // runtime.Goexit, not a panic: let it continue
		}
		ev.Err = fmt.Errorf("handler panicked: %v", p)
		panic(p)
	}()
	err = next.ServeHTTP(rw, r.WithContext(ctx))
	returned = true
	renew.stop()

	ev.Status = rw.status
	if ev.Status == 0 && !rw.hijacked && err == nil {
		ev.Status = http.StatusOK // net/http sends 200 for a handler that wrote nothing
	}
	if err != nil || rw.hijacked || h.cfg.inFlightOnly || !h.cfg.storeStatuses.Has(ev.Status) {
		ev.Outcome, ev.Err = OutcomeNotStored, err
		h.release(ctx, key, token, ev.KeyHash)
		return err
	}
	if renew.lost() {
		// The lease lapsed while next ran (store unreachable for a whole lease):
		// another request may hold the key now; Complete would be refused anyway.
		ev.Outcome = OutcomeNotStored
		return nil
	}
	resp := &cache.Response{Status: ev.Status, BodySize: rw.size}
	if rw.oversize {
		resp.Oversize = true
	} else {
		resp.Header, resp.Body = rw.header, rw.body
	}
	// Detached from the handler's deadline: storing must not fail because the
	// handler used its time; the store timeout bounds it instead.
	sctx, scancel := h.storeCtx(ctx)
	defer scancel()
	rec := &cache.Record{State: cache.StateCompleted, Response: resp}
	cerr := h.store.Complete(sctx, key, token, rec, h.cfg.ttl)
	if errors.Is(cerr, cache.ErrFull) && !resp.Oversize {
		// The response is larger than the store can ever hold (its bound is
		// below max_body). Remember the key as done without the response, as
		// for one above max_body: its retries get 409, never a second run.
		h.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency response too large for the store; stored as not replayable",
			slog.String("key_hash", ev.KeyHash), slog.Int("body_bytes", int(rw.size)), slog.Any("error", cerr))
		rec = &cache.Record{State: cache.StateCompleted,
			Response: &cache.Response{Status: resp.Status, BodySize: resp.BodySize, Oversize: true}}
		cerr = h.store.Complete(sctx, key, token, rec, h.cfg.ttl)
	}
	switch {
	case cerr == nil:
		ev.Outcome = OutcomeStored
	case errors.Is(cerr, cache.ErrLockLost):
		ev.Outcome, ev.Err = OutcomeNotStored, cerr
		h.cfg.logger.LogAttrs(ctx, slog.LevelError, "idempotency record not stored: the lease was lost; a retry will run again",
			slog.String("key_hash", ev.KeyHash), slog.Int("status", ev.Status))
	default:
		// The store failed (e.g. Redis restarting). The lock still holds the key,
		// so retries get 409 and nothing runs twice; keep trying to store the
		// response until the lease would have lapsed.
		ev.Outcome, ev.Err = OutcomeNotStored, cerr
		h.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency record not stored yet; retrying in the background",
			slog.String("key_hash", ev.KeyHash), slog.Int("status", ev.Status), slog.Any("error", cerr))
		h.pending.Add(1)
		go h.completeLater(context.WithoutCancel(ctx), key, token, rec, ev.KeyHash, renew.lastExtended())
	}
	return nil
}

// completeLater retries Complete until it succeeds, the lock is lost, or the lease
// (counted from its last renewal) would have lapsed. Wait waits for it.
func (h *Handler) completeLater(ctx context.Context, key, token string, rec *cache.Record, keyHash string, leaseFrom time.Time) {
	defer h.pending.Done()
	deadline := leaseFrom.Add(h.cfg.lockTTL)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if time.Until(deadline) < backoff {
			h.cfg.logger.LogAttrs(ctx, slog.LevelError, "idempotency record not stored before the lease lapsed; a retry will run again",
				slog.String("key_hash", keyHash))
			return
		}
		time.Sleep(backoff)
		sctx, cancel := h.storeCtx(ctx)
		err := h.store.Complete(sctx, key, token, rec, h.cfg.ttl)
		cancel()
		switch {
		case err == nil:
			h.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "idempotency record stored after a retry", slog.String("key_hash", keyHash))
			return
		case errors.Is(err, cache.ErrLockLost):
			h.cfg.logger.LogAttrs(ctx, slog.LevelError, "idempotency record not stored: the lease was lost; a retry will run again",
				slog.String("key_hash", keyHash))
			return
		}
	}
}

// Wait blocks until responses whose storing is being retried in the background
// are stored or given up, or ctx is done. Call it on shutdown, after the server
// stopped accepting requests.
func (h *Handler) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { h.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Handler) release(ctx context.Context, key, token, keyHash string) {
	sctx, cancel := h.storeCtx(ctx)
	defer cancel()
	if err := h.store.Release(sctx, key, token); err != nil {
		level := slog.LevelError
		if errors.Is(err, cache.ErrLockLost) {
			level = slog.LevelWarn
		}
		h.cfg.logger.LogAttrs(ctx, level, "idempotency lock not released; the key stays locked until its lease lapses",
			slog.String("key_hash", keyHash), slog.Any("error", err))
	}
}

// passThrough calls next unprotected, noting the status for the observer.
func (h *Handler) passThrough(w http.ResponseWriter, r *http.Request, next Next, ev *Event) error {
	sw := &statusWriter{ResponseWriter: w}
	err := next.ServeHTTP(sw, r)
	ev.Status = sw.status
	if ev.Status == 0 && err == nil {
		ev.Status = http.StatusOK
	}
	if err != nil && ev.Err == nil {
		ev.Err = err
	}
	return err
}

var errBodyTooLarge = errors.New("request body too large")

// readBody reads the whole body (bounded) and puts an identical one back.
func (h *Handler) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	limit := h.cfg.maxRequestBody
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	var body []byte
	if r.ContentLength >= 0 {
		// Known length (net/http stops the body there): one exact allocation.
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
	} else {
		var buf bytes.Buffer
		n, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
		if err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
		if n > limit {
			return nil, errBodyTooLarge
		}
		body = buf.Bytes()
	}
	_ = r.Body.Close()
	// Reading the body made net/http send the client its "100 Continue": the
	// expectation is met. Forwarded as is, it would make the upstream send a second
	// one, which a reverse proxy relays to the client.
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		r.Header.Del("Expect")
	}
	// An io.NopCloser around a *bytes.Reader, exactly: net/http's transport
	// recognises it as in memory and sends the request line, headers and body
	// upstream in one write, where an unknown body type costs a second write
	// (and a second wake-up of the upstream) per request.
	r.Body = io.NopCloser(bytes.NewReader(body))
	// GetBody lets the transport retry on a dead keep-alive connection.
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return body, nil
}

// StoreKey returns the store key for key as sent with r: a hex SHA-256 of the
// request's scope and the key, so keys of different clients never meet and a
// client's key never reaches the store verbatim.
func (h *Handler) StoreKey(r *http.Request, key string) string {
	d := getDigest()
	defer digests.Put(d)
	if h.cfg.scopeFunc != nil {
		d.field(h.cfg.scopeFunc(r))
	} else {
		d.field(r.Host)
		for _, name := range h.cfg.scopeHeaders {
			d.header(r.Header, name)
		}
	}
	d.field(key)
	var sum [sha256.Size]byte
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], d.sum(sum[:0]))
	return string(out[:]) // one allocation, where EncodeToString makes two
}

// fingerprint identifies the request: method, path and query, chosen headers, body.
func (h *Handler) fingerprint(r *http.Request, body []byte) string {
	if h.cfg.fpFunc != nil {
		return h.cfg.fpFunc(r, body)
	}
	d := getDigest()
	defer digests.Put(d)
	d.field(r.Method)
	d.field(r.URL.RequestURI())
	for _, name := range h.cfg.fpHeaders {
		d.header(r.Header, name)
	}
	d.flush()
	_, _ = d.h.Write(body)
	var sum [sha256.Size]byte
	return string(d.sum(sum[:0]))
}

// digest is a SHA-256 state with a scratch buffer: fields are length-prefixed (so
// their boundaries are unambiguous) and gathered before hashing, which spares an
// allocation per field. Recycled through digests.
type digest struct {
	h   hash.Hash
	buf []byte
}

var digests = sync.Pool{New: func() any { return &digest{h: sha256.New(), buf: make([]byte, 0, 512)} }}

func getDigest() *digest {
	d := digests.Get().(*digest)
	d.h.Reset()
	d.buf = d.buf[:0]
	return d
}

func (d *digest) field(s string) {
	d.buf = binary.BigEndian.AppendUint64(d.buf, uint64(len(s)))
	d.buf = append(d.buf, s...)
	if len(d.buf) > 4096 {
		d.flush()
	}
}

func (d *digest) header(hdr http.Header, name string) {
	vals := hdr.Values(name)
	d.buf = binary.BigEndian.AppendUint64(d.buf, uint64(len(vals)))
	for _, v := range vals {
		d.field(v)
	}
}

func (d *digest) flush() {
	_, _ = d.h.Write(d.buf)
	d.buf = d.buf[:0]
}

func (d *digest) sum(b []byte) []byte {
	d.flush()
	if cap(d.buf) > 64<<10 {
		d.buf = make([]byte, 0, 512) // do not keep a huge scratch buffer pooled
	}
	return d.h.Sum(b)
}

// Lock tokens need only be unique per claim across every process sharing a
// store (they fence writes; they are never shown to clients). A random 64-bit
// prefix per process and a counter give that without a trip to the system's
// random source per request.
var (
	tokenPrefix = func() (p [8]byte) {
		_, _ = rand.Read(p[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
		return p
	}()
	tokenCounter atomic.Uint64
)

func newToken() string {
	var b [16]byte
	copy(b[:8], tokenPrefix[:])
	binary.BigEndian.PutUint64(b[8:], tokenCounter.Add(1))
	var out [32]byte
	hex.Encode(out[:], b[:])
	return string(out[:])
}

// renewal extends the lease every third of it while next runs. It uses a timer,
// not a goroutine, so fast requests pay almost nothing for it.
type renewal struct {
	h        *Handler
	ctx      context.Context
	key, tok string
	keyHash  string
	t        *time.Timer
	mu       sync.Mutex
	stopped  bool
	lostLock bool
	extended time.Time // when the lease was last set (claim or renewal)
	running  sync.WaitGroup
}

func (h *Handler) startRenewal(ctx context.Context, key, token, keyHash string) *renewal {
	rn := &renewal{h: h, ctx: ctx, key: key, tok: token, keyHash: keyHash, extended: time.Now()}
	rn.mu.Lock() // fire reads rn.t under mu; it may run before AfterFunc returns
	rn.t = time.AfterFunc(h.cfg.lockTTL/3, rn.fire)
	rn.mu.Unlock()
	return rn
}

func (rn *renewal) fire() {
	rn.mu.Lock()
	if rn.stopped {
		rn.mu.Unlock()
		return
	}
	rn.running.Add(1)
	rn.mu.Unlock()
	defer rn.running.Done()

	cfg := &rn.h.cfg
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rn.ctx), min(cfg.storeTimeout, cfg.lockTTL/3))
	started := time.Now()
	err := rn.h.store.Extend(ctx, rn.key, rn.tok, cfg.lockTTL)
	cancel()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if err == nil {
		rn.extended = started
	}
	switch {
	case errors.Is(err, cache.ErrLockLost):
		rn.lostLock = true
		cfg.logger.LogAttrs(rn.ctx, slog.LevelError, "idempotency lease lost while the request ran; its response will not be stored",
			slog.String("key_hash", rn.keyHash))
		return
	case err != nil:
		cfg.logger.LogAttrs(rn.ctx, slog.LevelWarn, "idempotency lease not renewed; retrying",
			slog.String("key_hash", rn.keyHash), slog.Any("error", err))
	}
	if !rn.stopped {
		rn.t.Reset(cfg.lockTTL / 3)
	}
}

// stop ends renewal and waits for a renewal under way.
func (rn *renewal) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.mu.Unlock()
	rn.t.Stop()
	rn.running.Wait()
}

// lastExtended is when the lease was last set; it lapses lockTTL after that.
func (rn *renewal) lastExtended() time.Time {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.extended
}

func (rn *renewal) lost() bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.lostLock
}

// statusWriter notes the status of a response passed through unprotected.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.status == 0 && code >= 200 {
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(p []byte) (int, error) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	return sw.ResponseWriter.Write(p)
}

func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

func (sw *statusWriter) Flush() { _ = http.NewResponseController(sw.ResponseWriter).Flush() }
