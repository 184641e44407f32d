package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Defaults of a Worker.
const (
	DefaultPoll        = time.Second
	DefaultConcurrency = 8
)

// Answers of one attempt (Attempt.Answer).
const (
	AnswerDone     = "done"      // a reconcile_done status
	AnswerNotFound = "not_found" // a reconcile_not_found status
	AnswerOther    = "other"     // any other status
	AnswerError    = "error"     // no answer: a transport error, a timeout
)

// Outcomes of a job (Attempt.Outcome).
const (
	OutcomeResolved  = "resolved"  // the done answer is stored: retries replay it
	OutcomeReleased  = "released"  // the key is released: the next retry runs
	OutcomeRetry     = "retry"     // tried again later
	OutcomeExhausted = "exhausted" // attempts or window ran out: held for an operator
	OutcomeGone      = "gone"      // the key was settled otherwise, or its hold ended
)

// Attempt is what a Worker reports of each job it worked on.
type Attempt struct {
	Route    string
	KeyHash  string // the store key's first 12 hex digits
	Attempt  int    // 1 for the first; 0 when nothing was sent
	Answer   string // Answer…; empty when nothing was sent
	Status   int
	Err      error
	Outcome  string // Outcome…
	Duration time.Duration

	resp *cache.Response // a done answer, to store
}

// Worker claims due reconcile jobs from the store and works them. Every
// instance sharing a store may run one: the store hands each job to one of them
// at a time.
type Worker struct {
	Store    cache.Store
	Jobs     cache.Reconciler
	Routes   map[string]*Rules // by Job.Route
	Upstream *url.URL          // the reconcile request's URL is resolved against it
	// Transport sends the requests; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// Prepare, when set, readies each reconcile request the way the
	// route's own requests are sent (the proxy's: the Host upstream_host
	// decides from Job.Host, a request id). An error means the job's request
	// cannot be sent so: nothing is sent, the job is exhausted with the
	// error as its reason, and the key stays held for an operator.
	Prepare func(req *http.Request, job *cache.Job) error
	Logger  *slog.Logger
	// Observe, when set, is called after each job worked on.
	Observe func(Attempt)
	// Trace, when set, wraps each attempt: it returns the context the request
	// is sent in (a span's) and the function that ends it.
	Trace func(ctx context.Context, a *Attempt) (context.Context, func())
	// Poll is how often the store is asked for due jobs; Concurrency bounds
	// the jobs worked on at once. Defaults DefaultPoll, DefaultConcurrency.
	Poll        time.Duration
	Concurrency int
	// StoreTimeout bounds each store call.
	StoreTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	wake chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func (w *Worker) init() {
	w.once.Do(func() {
		w.wake = make(chan struct{}, 1)
		if w.Poll <= 0 {
			w.Poll = DefaultPoll
		}
		if w.Concurrency <= 0 {
			w.Concurrency = DefaultConcurrency
		}
		if w.Logger == nil {
			w.Logger = slog.Default()
		}
		if w.StoreTimeout <= 0 {
			w.StoreTimeout = 5 * time.Second
		}
	})
}

// Wake makes the worker look for due jobs at t (a job this instance just
// scheduled), rather than at its next poll.
func (w *Worker) Wake(t time.Time) {
	w.init()
	time.AfterFunc(time.Until(t), func() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	})
}

// Run works due jobs until ctx ends, then waits for the attempts under way
// (each bounded by its route's reconcile_timeout).
func (w *Worker) Run(ctx context.Context) {
	w.init()
	defer w.wg.Wait()
	sem := make(chan struct{}, w.Concurrency)
	t := time.NewTicker(w.Poll)
	defer t.Stop()
	for {
		w.claimDue(ctx, sem)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.wake:
		}
	}
}

// claimDue claims due jobs while there are some and room to work them.
func (w *Worker) claimDue(ctx context.Context, sem chan struct{}) {
	for ctx.Err() == nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		token := newToken()
		sctx, cancel := context.WithTimeout(ctx, w.StoreTimeout)
		key, job, err := w.Jobs.ClaimReconcile(sctx, w.now(), token, w.lease())
		cancel()
		if err != nil {
			<-sem
			if !errors.Is(err, cache.ErrNotFound) && ctx.Err() == nil {
				w.Logger.Warn("reconcile: claiming a due job failed", "error", err)
			}
			return
		}
		w.wg.Add(1)
		go func() {
			defer func() { <-sem; w.wg.Done() }()
			w.work(context.WithoutCancel(ctx), key, token, job)
		}()
	}
}

// lease is the longest claim any route's jobs need.
func (w *Worker) lease() time.Duration {
	l := 10 * time.Second
	for _, r := range w.Routes {
		l = max(l, r.lease())
	}
	return l
}

func (w *Worker) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// readBody reads at most limit bytes of b; over reports a longer body.
func readBody(b io.Reader, limit int64) (body []byte, over bool, err error) {
	body, err = io.ReadAll(io.LimitReader(b, limit+1))
	if int64(len(body)) > limit {
		return nil, true, err
	}
	return body, false, err
}
