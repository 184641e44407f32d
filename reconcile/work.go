package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// maxLastError bounds the reason kept with a job for operators.
const maxLastError = 200

// work is one claimed job: check the key is still held, send the reconcile
// request, and settle the key or put the job back on the schedule.
func (w *Worker) work(ctx context.Context, key, token string, job *cache.Job) {
	a := Attempt{Route: job.Route, KeyHash: key[:min(12, len(key))]}
	start := time.Now()
	defer func() {
		a.Duration = time.Since(start)
		if a.Outcome != "" && w.Observe != nil {
			w.Observe(a)
		}
	}()
	now := w.now()
	rules := w.Routes[job.Route]
	switch {
	case job.State == cache.JobExhausted || !now.Before(job.Until):
		// Kept only to show operators what was tried, or past the hold:
		// the record is gone or an operator's now.
		w.finish(ctx, key, token)
		return
	case rules == nil:
		// The route reconciles no more (the configuration changed).
		job.LastError = "the route has no reconcile request any more"
		w.exhaust(ctx, key, token, job, &a, "reconcile: the route reconciles no more; the key stays held for an operator")
		return
	}
	sctx, cancel := context.WithTimeout(ctx, w.StoreTimeout)
	rec, err := w.Store.Get(sctx, key)
	cancel()
	switch {
	case errors.Is(err, cache.ErrNotFound) || err == nil && rec.State == cache.StateCompleted && (rec.Response == nil || !rec.Response.Unknown):
		a.Outcome = OutcomeGone // released, resolved or expired meanwhile
		w.finish(ctx, key, token)
		return
	case err != nil:
		w.Logger.Warn("reconcile: reading the held record failed; the job comes back after its claim", "key_hash", a.KeyHash, "error", err)
		return
	case rec.State == cache.StateInFlight:
		// The hold is not stored yet (its job is scheduled first), or the
		// key runs again: look again later, without counting an attempt.
		job.Due = now.Add(rules.Delay)
		w.update(ctx, key, token, job)
		return
	}
	req, err := w.request(job)
	if err != nil {
		// Not the way the route's own requests are sent, or not at all:
		// nothing is sent, and no later attempt would do better.
		job.LastStatus, job.LastError = 0, shorten(err.Error())
		w.exhaust(ctx, key, token, job, &a, "reconcile: the request cannot be sent as the route's own are; the key stays held for an operator")
		return
	}
	job.Attempts++
	a.Attempt = job.Attempts
	asked := now
	w.attempt(ctx, rules, job, req, &a)
	// A not-found answer counts only once the original can no longer be
	// running (an upstream still working on it finds nothing yet), and
	// settles when a second such answer confirms it; before, the next
	// attempt comes no earlier than when the original can no longer be
	// running.
	var notBefore time.Time
	switch a.Answer {
	case AnswerDone:
		if w.settle(ctx, key, token, rules, &a) {
			return
		}
	case AnswerNotFound:
		over := rules.sent(job).Add(rules.Running)
		if !asked.Before(over) {
			job.NotFound++
		}
		if job.NotFound >= 2 {
			if w.settle(ctx, key, token, rules, &a) {
				return
			}
		}
		notBefore = over
	}
	next := w.now().Add(rules.delay(job.Attempts))
	if next.Before(notBefore) {
		next = notBefore
	}
	if job.Attempts >= rules.Attempts || next.After(job.Deadline) {
		w.exhaust(ctx, key, token, job, &a, "reconcile: attempts ran out; the key stays held for an operator")
		return
	}
	a.Outcome = OutcomeRetry
	job.Due = next
	w.update(ctx, key, token, job)
}

// attempt sends the reconcile request and classifies its answer into a; a
// done answer's response is left in a.resp.
func (w *Worker) attempt(ctx context.Context, rules *Rules, job *cache.Job, req *http.Request, a *Attempt) {
	ctx, cancel := context.WithTimeout(ctx, rules.Timeout)
	defer cancel()
	if w.Trace != nil {
		var end func()
		ctx, end = w.Trace(ctx, a)
		defer end()
	}
	job.LastStatus, job.LastError = 0, ""
	t := w.Transport
	if t == nil {
		t = http.DefaultTransport
	}
	resp, err := t.RoundTrip(req.WithContext(ctx))
	if err != nil {
		a.Answer, a.Err = AnswerError, err
		job.LastError = shorten(err.Error())
		return
	}
	defer resp.Body.Close()
	a.Status, job.LastStatus = resp.StatusCode, resp.StatusCode
	switch {
	case rules.NotFound.Has(resp.StatusCode):
		a.Answer = AnswerNotFound
	case !rules.Done.Has(resp.StatusCode):
		a.Answer = AnswerOther
	default:
		body, over, err := readBody(resp.Body, rules.MaxBody)
		if err != nil {
			a.Answer, a.Err = AnswerError, fmt.Errorf("reading the answer: %w", err)
			job.LastError = shorten(a.Err.Error())
			return
		}
		a.Answer = AnswerDone
		a.resp = &cache.Response{Status: resp.StatusCode, BodySize: int64(len(body)), Oversize: over}
		if !over {
			a.resp.Body = body
			if ct := resp.Header.Get("Content-Type"); ct != "" {
				a.resp.Header = http.Header{"Content-Type": {ct}}
			}
		}
	}
}

// request is job's request on the upstream, readied by Prepare; it is sent
// with one round trip, so redirects are not followed.
func (w *Worker) request(job *cache.Job) (*http.Request, error) {
	ref, err := url.Parse(job.URL)
	if err != nil {
		return nil, fmt.Errorf("the stored reconcile URL: %w", err)
	}
	u := *w.Upstream
	escaped := strings.TrimSuffix(w.Upstream.EscapedPath(), "/") + ref.EscapedPath()
	if u.Path, err = url.PathUnescape(escaped); err != nil {
		return nil, fmt.Errorf("the stored reconcile URL: %w", err)
	}
	u.RawPath, u.RawQuery = escaped, ref.RawQuery
	req, err := http.NewRequest(job.Method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for name, vals := range job.Header {
		req.Header[name] = append([]string(nil), vals...)
	}
	req.Header.Set("User-Agent", "idemproxy-reconcile")
	if w.Prepare != nil {
		if err := w.Prepare(req, job); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// settle applies a done or not-found answer: it reports whether the job is
// over (settled, or settled otherwise meanwhile).
func (w *Worker) settle(ctx context.Context, key, token string, rules *Rules, a *Attempt) bool {
	sctx, cancel := context.WithTimeout(ctx, w.StoreTimeout)
	defer cancel()
	var err error
	if a.Answer == AnswerDone {
		a.Outcome = OutcomeResolved
		_, err = cache.Settle(sctx, w.Store, key, a.resp, rules.TTL, cache.ByReconcile, time.Now())
	} else {
		a.Outcome = OutcomeReleased
		_, err = cache.Settle(sctx, w.Store, key, nil, 0, cache.ByReconcile, time.Now())
	}
	switch {
	case errors.Is(err, cache.ErrNotUnknown) || errors.Is(err, cache.ErrNotFound):
		a.Outcome = OutcomeGone
	case err != nil:
		a.Err = fmt.Errorf("settling the key: %w", err)
		w.Logger.Warn("reconcile: settling the key failed; tried again", "key_hash", a.KeyHash, "error", err)
		return false
	default:
		w.Logger.Info("reconcile: unknown outcome settled", "key_hash", a.KeyHash, "outcome", a.Outcome,
			"status", a.Status, "attempt", a.Attempt)
	}
	w.finish(ctx, key, token)
	return true
}

// exhaust ends the schedule: the key stays held for an operator, and the job
// is kept until the hold ends to show what was tried.
func (w *Worker) exhaust(ctx context.Context, key, token string, job *cache.Job, a *Attempt, msg string) {
	a.Outcome = OutcomeExhausted
	job.State, job.Due = cache.JobExhausted, job.Until
	w.Logger.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String("key_hash", a.KeyHash), slog.Int("attempts", job.Attempts), slog.Int("last_status", job.LastStatus),
		slog.String("last_error", job.LastError))
	w.update(ctx, key, token, job)
}

func (w *Worker) update(ctx context.Context, key, token string, job *cache.Job) {
	sctx, cancel := context.WithTimeout(ctx, w.StoreTimeout)
	defer cancel()
	if err := w.Jobs.UpdateReconcile(sctx, key, token, job); err != nil {
		w.Logger.Warn("reconcile: updating the job failed; it comes back after its claim", "key_hash", key[:min(12, len(key))], "error", err)
	}
}

func (w *Worker) finish(ctx context.Context, key, token string) {
	sctx, cancel := context.WithTimeout(ctx, w.StoreTimeout)
	defer cancel()
	if err := w.Jobs.FinishReconcile(sctx, key, token); err != nil && !errors.Is(err, cache.ErrClaimLost) {
		w.Logger.Warn("reconcile: finishing the job failed; it comes back after its claim", "key_hash", key[:min(12, len(key))], "error", err)
	}
}

func shorten(s string) string {
	if len(s) > maxLastError {
		return s[:maxLastError]
	}
	return s
}
