package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/reconcile"
)

// clock is a clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time     { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)    { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func newClock(t time.Time) *clock   { return &clock{t: t} }
func (f *fixture) onClock(c *clock) { f.now, f.sched.Now = c.Now, c.Now }

var base = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

// held reports whether storeKey is still held as an unknown outcome.
func (f *fixture) held(t *testing.T, storeKey string) bool {
	t.Helper()
	rec, err := f.store.Get(context.Background(), storeKey)
	if err != nil && !errors.Is(err, cache.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil && rec.Response != nil && rec.Response.Unknown
}

// An upstream may still be working on the original when it is first asked:
// "not found" then means "not yet", and does not count. A not-found answer
// counts once the original can no longer be running (Running after it was
// sent), and releases the key when a second one that counts confirms it; the
// attempt after an early one comes no earlier than that. A done answer
// settles at once, however early.
func TestNotFoundWaitsForTheOriginalAndASecondAnswer(t *testing.T) {
	f := newFixture(t)
	clk := newClock(base)
	f.onClock(clk)
	f.rules.Running = 30 * time.Second
	f.rules.Attempts = 10
	sent := base.Add(-time.Second) // the original went upstream a second before the hold
	atSent := func(h *middleware.Held) { h.Sent = sent }
	nf, done := f.holdWith(t, "nf-1", atSent), f.holdWith(t, "done-1", atSent)
	f.run(t, 1, map[string]*reconcile.Rules{"/charges": f.rules})

	clk.Set(base.Add(f.rules.Delay))
	testutil.Eventually(t, 5*time.Second, "the first attempts", func() bool {
		j := f.job(t, nf)
		return f.job(t, done) == nil && j != nil && j.Attempts == 1
	})
	if f.held(t, done) || f.count("done-1") != 1 {
		t.Fatalf("done-1 not settled at its first attempt (%d requests)", f.count("done-1"))
	}
	j := f.job(t, nf)
	if !f.held(t, nf) || j.Attempts != 1 || j.LastStatus != 404 || j.NotFound != 0 {
		t.Fatalf("nf-1 after one not-found answer, before the original can have ended: held %v, job %+v", f.held(t, nf), j)
	}
	if want := sent.Add(f.rules.Running); !j.Due.Equal(want) {
		t.Fatalf("nf-1's next attempt is due %v, want when the original can no longer be running (%v)", j.Due, want)
	}

	// A second not-found answer that still comes too early (its job was
	// due earlier, as a reload that lengthens upstream_timeout leaves it)
	// releases nothing either.
	over := j.Due
	j.Due = base.Add(2 * f.rules.Delay)
	if err := f.store.ScheduleReconcile(context.Background(), nf, j); err != nil {
		t.Fatal(err)
	}
	clk.Set(j.Due)
	testutil.Eventually(t, 5*time.Second, "the early second attempt", func() bool { j := f.job(t, nf); return j != nil && j.Attempts == 2 })
	if j := f.job(t, nf); !f.held(t, nf) || !j.Due.Equal(over) || j.NotFound != 0 {
		t.Fatalf("nf-1 after a second not-found answer before the original can have ended: held %v, due %v, %d counted; want held, due %v, none counted", f.held(t, nf), j.Due, j.NotFound, over)
	}

	// The first not-found answer once the original can no longer be running
	// counts, and asks again after reconcile_delay; the second releases.
	clk.Set(over)
	testutil.Eventually(t, 5*time.Second, "the first late attempt", func() bool { j := f.job(t, nf); return j != nil && j.NotFound == 1 })
	j = f.job(t, nf)
	if !f.held(t, nf) || !j.Due.After(over) || j.Due.After(over.Add(f.rules.MaxDelay)) {
		t.Fatalf("nf-1 after one late not-found answer: held %v, due %v; want held, due within reconcile_max_delay after %v", f.held(t, nf), j.Due, over)
	}
	clk.Set(j.Due)
	testutil.Eventually(t, 5*time.Second, "a confirming not-found answer to release nf-1", func() bool { return f.job(t, nf) == nil })
	if _, err := f.store.Get(context.Background(), nf); !errors.Is(err, cache.ErrNotFound) || f.count("nf-1") != 4 {
		t.Fatalf("nf-1 after its last not-found answer: %v, %d requests; want released after 4", err, f.count("nf-1"))
	}
}

// A first not-found answer that comes after the original can no longer be
// running still waits for a second (the regular delay later); a legacy job,
// which kept no send time, counts from its hold.
func TestNotFoundIsConfirmedEvenLate(t *testing.T) {
	f := newFixture(t)
	clk := newClock(base)
	f.onClock(clk)
	f.rules.Running = 30 * time.Second
	f.rules.Attempts = 10
	late := f.holdWith(t, "nf-late", func(h *middleware.Held) { h.Sent = base.Add(-time.Minute) })
	legacy := f.hold(t, "nf-legacy")
	j := f.job(t, legacy)
	j.Sent = time.Time{} // as stored before jobs kept it
	if err := f.store.ScheduleReconcile(context.Background(), legacy, j); err != nil {
		t.Fatal(err)
	}
	f.run(t, 1, map[string]*reconcile.Rules{"/charges": f.rules})

	clk.Set(base.Add(f.rules.Delay))
	testutil.Eventually(t, 5*time.Second, "the first attempts", func() bool {
		a, b := f.job(t, late), f.job(t, legacy)
		return a != nil && a.NotFound == 1 && b != nil && b.Attempts == 1
	})
	if j := f.job(t, late); !f.held(t, late) || !j.Due.Equal(base.Add(2*f.rules.Delay)) {
		t.Fatalf("nf-late after one not-found answer: held %v, due %v; want held, asked again after reconcile_delay", f.held(t, late), j.Due)
	}
	if j := f.job(t, legacy); !f.held(t, legacy) || !j.Due.Equal(base.Add(f.rules.Running)) || j.NotFound != 0 {
		t.Fatalf("the legacy job: held %v, due %v; want held until Running after its hold (%v)", f.held(t, legacy), j.Due, base.Add(f.rules.Running))
	}
	clk.Set(base.Add(f.rules.Running))
	testutil.Eventually(t, 5*time.Second, "nf-late to be released", func() bool { return f.job(t, late) == nil })
	if f.held(t, late) || f.count("nf-late") != 2 {
		t.Fatalf("nf-late after a second not-found answer: held %v, requests %d", f.held(t, late), f.count("nf-late"))
	}
	// The legacy job's first not-found answer that counts came now: a
	// second, reconcile_delay later, releases it.
	testutil.Eventually(t, 5*time.Second, "the legacy job's first counted answer", func() bool { j := f.job(t, legacy); return j != nil && j.NotFound == 1 })
	clk.Set(f.job(t, legacy).Due)
	testutil.Eventually(t, 5*time.Second, "the legacy job to be released", func() bool { return f.job(t, legacy) == nil })
	if f.held(t, legacy) || f.count("nf-legacy") != 3 {
		t.Fatalf("the legacy job after its confirming answer: held %v, requests %d", f.held(t, legacy), f.count("nf-legacy"))
	}
}

// The job keeps what the request is sent by: the original's Host in canonical
// form, when the original was sent, and the forwarding headers (which win
// over a copied header of the same name). Prepare readies each request (its
// Host); a Prepare error sends nothing and leaves the key held.
func TestJobKeepsHowTheOriginalWasSent(t *testing.T) {
	f := newFixture(t)
	f.rules.Headers = []string{"Authorization", "X-Forwarded-Host"}
	f.sched.Forwarded = func(r *http.Request) http.Header {
		return http.Header{"X-Forwarded-Host": {"from-forwarding"}, "X-Forwarded-Proto": {"https"}}
	}
	sent := time.Now().Add(-time.Second)
	key := f.holdWith(t, "done-h", func(h *middleware.Held) {
		h.Sent = sent
		h.Request.Host = "Shop.Example.:443"
		h.Request.Header.Set("X-Forwarded-Host", "from-client")
	})
	j := f.job(t, key)
	if j.Host != "shop.example" || !j.Sent.Equal(sent) || j.Legacy() ||
		j.Header.Get("X-Forwarded-Host") != "from-forwarding" || j.Header.Get("X-Forwarded-Proto") != "https" || j.Header.Get("Authorization") != "Bearer t" {
		t.Fatalf("job %+v", j)
	}

	f.prepare = func(req *http.Request, job *cache.Job) error {
		if job.Route != "/charges" {
			return errors.New("not this route's")
		}
		req.Host = "tenant." + job.Host
		return nil
	}
	f.sched.Route = "/refused"
	other := *f.rules
	refusedJob := f.hold(t, "done-other")
	f.run(t, 1, map[string]*reconcile.Rules{"/charges": f.rules, "/refused": &other})
	testutil.Eventually(t, 5*time.Second, "the jobs to end", func() bool {
		j := f.job(t, refusedJob)
		return f.job(t, key) == nil && j != nil && j.State == cache.JobExhausted
	})
	f.mu.Lock()
	host := f.hosts["done-h"]
	f.mu.Unlock()
	if host != "tenant.shop.example" || f.held(t, key) {
		t.Fatalf("done-h: asked with Host %q, held %v; want tenant.shop.example, resolved", host, f.held(t, key))
	}
	if j := f.job(t, refusedJob); f.count("done-other") != 0 || !f.held(t, refusedJob) || j.LastError != "not this route's" || j.Attempts != 0 {
		t.Fatalf("a request Prepare refused: %d sent, job %+v; want none, held, the reason kept", f.count("done-other"), j)
	}
}
