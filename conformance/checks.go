package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// check is one check of the suite: its id, what it holds, where the draft
// (or a promise) says so, when it is required, and the check itself.
type check struct {
	id, title, section string
	required           func(Config) bool
	fn                 func(context.Context, *suite) Result
}

func always(Config) bool      { return true }
func strict(c Config) bool    { return c.Level == Strict }
func advisory(Config) bool    { return false }
func keyNeeded(c Config) bool { return !c.KeyOptional }

// checks are the checks in the order they run: problem-json reads the error
// answers of the ones before it.
var checks = []check{
	{"replay", "a repeat gets the first response replayed: status, body, headers", "draft §2.6 (Retry)", always, checkReplay},
	{"in-flight", "a repeat while the first runs gets 409, or waits and gets its replay; never a second execution", "draft §2.6 (Concurrent Request), §2.7 (409)", always, checkInFlight},
	{"concurrent", "duplicates sent at once execute once", "draft §2.6; promise: one execution", always, checkConcurrent},
	{"mismatch", "the same key with another body gets 422", "draft §2.2, §2.7 (422)", always, checkMismatch},
	{"missing-key", "a request without a key on a route that requires one gets 400", "draft §2.7 (400)", keyNeeded, checkMissingKey},
	{"invalid-key", "an invalid key (too long, not an sf-string) gets 400", "draft §2.1 (an sf-string), §5 (validate the key)", strict, checkInvalidKey},
	{"problem-json", "error answers are application/problem+json", "draft §2.7 (RFC 9457 bodies)", strict, checkProblemJSON},
	{"credential-scope", "keys are scoped by credential: another credential gets its own execution, never the first's answer", "draft §5 (a composite key); promise: no client reads another's answer", strict, checkCredentialScope},
	{"unknown-outcome", "a request whose outcome is unknown (timed out) is not re-run", "promise: an unknown outcome is not re-run", advisory, checkUnknownOutcome},
	checkExpiry,
}

var checkExpiry = check{"expiry", "the advertised expiry is honoured: replayed before it, new after it", "draft §2.3", advisory, checkExpiryFn}

// IDs returns the checks' ids, in the order they run.
func IDs() []string {
	ids := make([]string, len(checks))
	for i, c := range checks {
		ids[i] = c.id
	}
	return ids
}

func pass(format string, args ...any) Result {
	return Result{Status: Pass, Saw: fmt.Sprintf(format, args...)}
}

func fail(format string, args ...any) Result {
	return Result{Status: Fail, Saw: fmt.Sprintf(format, args...)}
}

func skip(format string, args ...any) Result {
	return Result{Status: Skip, Saw: fmt.Sprintf(format, args...)}
}

// first sends the first request of a key, which must run (2xx); ok false
// comes with the failing Result.
func (s *suite) first(ctx context.Context, p post) (*response, Result, bool) {
	r := s.post(ctx, p)
	if !r.ok() {
		return r, fail("the first request with a fresh key answered %s, not 2xx", r.short()), false
	}
	return r, Result{}, true
}

// replayHeaders are the answer's headers a replay must carry as the first
// had them (when it had them): what a client reads of a created resource.
var replayHeaders = []string{"Content-Type", "Content-Encoding", "Content-Language", "Content-Location", "Location", "ETag", "Link"}

func checkReplay(ctx context.Context, s *suite) Result {
	key := s.key()
	first, res, ok := s.first(ctx, post{path: s.cfg.Path, key: key})
	if !ok {
		return res
	}
	again := s.post(ctx, post{path: s.cfg.Path, key: key})
	switch {
	case again.err != nil:
		return fail("the repeat got %s", again.short())
	case again.ok() && again.body != first.body:
		return fail("executed twice: the repeat ran again and answered %s; the first answered %s", again.short(), first.short())
	case again.status != first.status:
		return fail("the repeat answered %s; the first %s", again.short(), first.short())
	case again.body != first.body:
		return fail("the repeat's body differs from the first's: %q, the first %q", clip(again.body, 60), clip(first.body, 60))
	}
	var same, differ []string
	for _, name := range replayHeaders {
		want := first.header.Values(name)
		if len(want) == 0 {
			continue
		}
		if got := again.header.Values(name); strings.Join(got, "\n") != strings.Join(want, "\n") {
			differ = append(differ, fmt.Sprintf("%s %q, the first %q", name, strings.Join(got, ", "), strings.Join(want, ", ")))
			continue
		}
		same = append(same, name)
	}
	if len(differ) > 0 {
		return fail("same status and body, but the replay's headers differ: %s", strings.Join(differ, "; "))
	}
	return pass("%d replayed: the same status, body (%d bytes) and %s", first.status, len(first.body), orNone(same))
}

func checkInFlight(ctx context.Context, s *suite) Result {
	path := s.cfg.SlowPath
	if path == "" {
		path = s.cfg.Path
	}
	key := s.key()
	firstc := make(chan *response, 1)
	go func() { firstc <- s.post(ctx, post{path: path, key: key}) }()
	// Give the first time to reach the target and claim its key.
	gap := min(100*time.Millisecond+2*s.latency, 400*time.Millisecond)
	var first *response
	select {
	case first = <-firstc:
	case <-time.After(gap):
	}
	if first != nil {
		if !first.ok() {
			return fail("the first request on %s answered %s, not 2xx", path, first.short())
		}
		return skip("the first request on %s finished in %v, before a repeat could be sent: give --slow-path, a route whose POST takes a second or more", path, ms(first.took))
	}
	repeat := s.post(ctx, post{path: path, key: key})
	first = <-firstc
	if first.status == http.StatusConflict && repeat.ok() && repeat.sent.Before(first.done) {
		// The repeat reached the target first (the first was slow to
		// arrive): the roles swap.
		first, repeat = repeat, first
	}
	if !first.ok() {
		return fail("the first request on %s answered %s, not 2xx", path, first.short())
	}
	if first.done.Before(repeat.sent) {
		return skip("the first request on %s finished in %v, before the repeat was sent: give --slow-path, a route whose POST takes a second or more", path, ms(first.took))
	}
	into := ms(max(repeat.sent.Sub(first.sent), first.sent.Sub(repeat.sent)))
	switch {
	case repeat.status == http.StatusConflict:
		s.expectError("in-flight", repeat)
		after := s.post(ctx, post{path: path, key: key})
		switch {
		case after.sameAs(first):
			return pass("409 for the repeat sent %v into the first (which took %v); afterwards the first's %d is replayed", into, ms(first.took), first.status)
		case after.ok():
			return fail("409 while the first ran, but afterwards the key ran a second time: %s; the first %s", after.short(), first.short())
		}
		return fail("409 while the first ran, but afterwards a repeat answered %s, not the first's response", after.short())
	case repeat.sameAs(first):
		return pass("the repeat sent %v into the first waited for it and got its %d replayed", into, first.status)
	case repeat.ok():
		return fail("executed twice: the repeat sent %v into the first ran too and answered %s; the first %s", into, repeat.short(), first.short())
	}
	return fail("the repeat sent %v into the first answered %s; want 409, or the first's response", into, repeat.short())
}

func checkConcurrent(ctx context.Context, s *suite) Result {
	path := s.cfg.SlowPath
	if path == "" {
		path = s.cfg.Path
	}
	key := s.key()
	n := s.cfg.Concurrency
	resps := make([]*response, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range resps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resps[i] = s.post(ctx, post{path: path, key: key})
		}()
	}
	close(start)
	wg.Wait()
	var ran *response
	bodies := map[string]bool{}
	succeeded, conflicts := 0, 0
	var others []string
	for _, r := range resps {
		switch {
		case r.ok():
			succeeded++
			if !bodies[r.body] {
				bodies[r.body] = true
				ran = r
			}
		case r.status == http.StatusConflict:
			conflicts++
			s.expectError("concurrent", r)
		default:
			others = append(others, r.short())
		}
	}
	switch {
	case len(bodies) > 1:
		return fail("executed %d times: %d duplicates sent at once got %d different 2xx bodies", len(bodies), n, len(bodies))
	case len(others) > 0:
		return fail("%d duplicates sent at once: answers other than the first's response or 409: %s", n, strings.Join(others, "; "))
	case ran == nil:
		return fail("%d duplicates sent at once: none ran (%d answered 409)", n, conflicts)
	}
	after := s.post(ctx, post{path: path, key: key})
	if !after.sameAs(ran) {
		return fail("%d duplicates sent at once ran once, but afterwards a repeat answered %s, not that response", n, after.short())
	}
	return pass("%d duplicates sent at once executed once: %d got its %d, %d got 409; a repeat afterwards gets it replayed", n, succeeded, ran.status, conflicts)
}

func checkMismatch(ctx context.Context, s *suite) Result {
	key := s.key()
	first, res, ok := s.first(ctx, post{path: s.cfg.Path, key: key})
	if !ok {
		return res
	}
	other := s.post(ctx, post{path: s.cfg.Path, key: key, body: s.cfg.OtherBody})
	switch {
	case other.status == http.StatusUnprocessableEntity && other.err == nil:
		s.expectError("mismatch", other)
		return pass("422 for the same key with another body")
	case other.sameAs(first):
		return fail("the same key with another body got the first's answer replayed (%s): the body is not part of the request's identity", first.short())
	case other.ok():
		return fail("the same key with another body ran as a new request: %s; the first %s", other.short(), first.short())
	}
	return fail("the same key with another body answered %s; want 422", other.short())
}

func checkMissingKey(ctx context.Context, s *suite) Result {
	if s.cfg.KeyOptional {
		return skip("--key-optional: the route runs requests without a key, so no 400 is due")
	}
	r := s.post(ctx, post{path: s.cfg.Path})
	switch {
	case r.status == http.StatusBadRequest && r.err == nil:
		s.expectError("missing-key", r)
		return pass("400 for a POST without %s", s.cfg.KeyHeader)
	case r.ok():
		return fail("a POST without %s ran: %s (if the route does not require a key, say --key-optional)", s.cfg.KeyHeader, r.short())
	}
	return fail("a POST without %s answered %s; want 400", s.cfg.KeyHeader, r.short())
}

func checkInvalidKey(ctx context.Context, s *suite) Result {
	long := s.key()
	long += strings.Repeat("x", s.cfg.MaxKeyLength+1-len(long))
	cases := []struct{ what, value string }{
		{fmt.Sprintf("too long (%d characters)", len(long)), s.keyValue(long)},
		{"an unterminated sf-string", `"` + s.key()},
		{"not ASCII (é)", s.keyValue(s.key() + "é")},
	}
	var bad, good []string
	for _, c := range cases {
		r := s.post(ctx, post{path: s.cfg.Path, rawKey: c.value})
		switch {
		case r.status == http.StatusBadRequest && r.err == nil:
			s.expectError("invalid-key", r)
			good = append(good, c.what)
		case r.ok():
			bad = append(bad, fmt.Sprintf("%s: ran, %s", c.what, r.short()))
		default:
			bad = append(bad, fmt.Sprintf("%s: %s, want 400", c.what, r.short()))
		}
	}
	if len(bad) > 0 {
		return fail("%s", strings.Join(bad, "; "))
	}
	return pass("400 for each key: %s", strings.Join(good, ", "))
}

func checkProblemJSON(_ context.Context, s *suite) Result {
	s.mu.Lock()
	errs := append([]seen(nil), s.errors...)
	s.mu.Unlock()
	if len(errs) == 0 {
		return skip("no error answer was seen (the checks above expect 400, 409 and 422), so none could be read")
	}
	var bad []string
	count := map[string]int{}
	for _, e := range errs {
		what := fmt.Sprintf("%d (%s)", e.resp.status, e.check)
		count[what]++
		if count[what] > 1 {
			continue // one of each is enough to say what is wrong
		}
		ct := e.resp.header.Get("Content-Type")
		if mediaType(ct) != "application/problem+json" {
			bad = append(bad, fmt.Sprintf("%s: Content-Type %q", what, ct))
			continue
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(e.resp.body), &doc); err != nil {
			bad = append(bad, fmt.Sprintf("%s: the body is not a JSON object: %s", what, clip(e.resp.body, 60)))
			continue
		}
		if st, ok := doc["status"]; ok {
			if f, isNum := st.(float64); !isNum || int(f) != e.resp.status {
				bad = append(bad, fmt.Sprintf("%s: its \"status\" member is %v", what, st))
			}
		}
	}
	if len(bad) > 0 {
		return fail("%s", strings.Join(bad, "; "))
	}
	names := make([]string, 0, len(count))
	for what, n := range count {
		if n > 1 {
			what = fmt.Sprintf("%s ×%d", what, n)
		}
		names = append(names, what)
	}
	sort.Strings(names)
	return pass("every error answer is application/problem+json with a JSON object: %s", strings.Join(names, ", "))
}

func checkCredentialScope(ctx context.Context, s *suite) Result {
	a, b := http.Header{}, http.Header{}
	switch {
	case len(s.cfg.OtherHeader) > 0:
		for name, values := range s.cfg.OtherHeader {
			b[http.CanonicalHeaderKey(name)] = values
			if v, ok := s.cfg.Header[http.CanonicalHeaderKey(name)]; ok {
				a[http.CanonicalHeaderKey(name)] = v
			} else {
				a[http.CanonicalHeaderKey(name)] = nil
			}
		}
	case s.cfg.Header.Get("Authorization") != "":
		return skip("the requests carry an Authorization of --header: give --other-header with a second valid credential")
	default:
		a.Set("Authorization", "Bearer conformance-a-"+s.runID)
		b.Set("Authorization", "Bearer conformance-b-"+s.runID)
	}
	names := make([]string, 0, len(b))
	for name := range b {
		names = append(names, name)
	}
	sort.Strings(names)
	cred := strings.Join(names, ", ")
	key := s.key()
	first, res, ok := s.first(ctx, post{path: s.cfg.Path, key: key, override: a})
	if !ok {
		return res
	}
	other := s.post(ctx, post{path: s.cfg.Path, key: key, override: b})
	switch {
	case other.sameAs(first):
		return fail("another %s sending the same key got the first credential's answer: %s", cred, first.short())
	case other.err == nil && (other.status == http.StatusUnauthorized || other.status == http.StatusForbidden):
		return skip("the other credential was refused (%d): give --other-header with a second valid credential", other.status)
	case other.status == http.StatusConflict || other.status == http.StatusUnprocessableEntity:
		return fail("another %s sending the same key got %s: the key is shared between credentials, so one client can block another's", cred, other.short())
	case !other.ok():
		return fail("another %s sending the same key got %s, not an execution of its own", cred, other.short())
	}
	againA := s.post(ctx, post{path: s.cfg.Path, key: key, override: a})
	switch {
	case againA.sameAs(first):
	case againA.sameAs(other):
		return fail("the first credential's repeat got the other credential's answer: %s", other.short())
	case againA.ok():
		return fail("the first credential's repeat ran again: %s; its first %s", againA.short(), first.short())
	default:
		return fail("the first credential's repeat answered %s, not its first response", againA.short())
	}
	againB := s.post(ctx, post{path: s.cfg.Path, key: key, override: b})
	if !againB.sameAs(other) {
		return fail("the other credential's repeat answered %s, not its own first response %s", againB.short(), other.short())
	}
	return pass("two credentials (%s), one key: each got its own execution, and each repeat its own answer back", cred)
}

func checkUnknownOutcome(ctx context.Context, s *suite) Result {
	path := s.cfg.TimeoutPath
	if path == "" {
		return skip("give --timeout-path, a route whose POST outlives the target's own deadline (a proxy's upstream timeout), to see this")
	}
	key := s.key()
	first := s.post(ctx, post{path: path, key: key})
	if first.ok() || (first.err == nil && first.status < 500 && first.status != http.StatusRequestTimeout) {
		return skip("the first request on %s did not time out: %s after %v; --timeout-path must outlive the target's deadline", path, first.short(), ms(first.took))
	}
	again := s.post(ctx, post{path: path, key: key})
	took, firstTook := ms(again.took), ms(first.took)
	if first.took >= 100*time.Millisecond && again.took >= first.took/2 {
		return fail("re-run: the first timed out after %v (%s); the repeat took %v too and answered %s, so it was sent on again", firstTook, first.short(), took, again.short())
	}
	return pass("the first timed out after %v (%s); the repeat answered %s at once (%v): not re-run", firstTook, first.short(), again.short(), took)
}

func checkExpiryFn(ctx context.Context, s *suite) Result {
	d := s.cfg.Expiry
	if d <= 0 {
		return skip("give --expiry, the target's published key expiry (draft §2.3), to see this; the check waits that long")
	}
	key := s.key()
	first, res, ok := s.first(ctx, post{path: s.cfg.Path, key: key})
	if !ok {
		return res
	}
	sleep := func(until time.Time) bool {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !sleep(first.done.Add(d / 2)) {
		return fail("stopped: %v", ctx.Err())
	}
	before := s.post(ctx, post{path: s.cfg.Path, key: key})
	if !before.sameAs(first) {
		return fail("forgotten before its advertised expiry: %v into %v a repeat answered %s; the first %s", d/2, d, before.short(), first.short())
	}
	grace := min(max(d/4, 500*time.Millisecond), 5*time.Second)
	if !sleep(first.done.Add(d + grace)) {
		return fail("stopped: %v", ctx.Err())
	}
	after := s.post(ctx, post{path: s.cfg.Path, key: key})
	switch {
	case after.sameAs(first):
		return fail("replayed %v into an advertised expiry of %v, and still replayed %v after it", d/2, d, grace)
	case after.ok():
		return pass("replayed %v into an advertised expiry of %v; %v after it, the key ran anew", d/2, d, grace)
	}
	return fail("replayed %v into an advertised expiry of %v; %v after it a repeat answered %s, not a new execution", d/2, d, grace, after.short())
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "no header of note"
	}
	return strings.Join(names, ", ")
}

// ms is a duration for a report line, to the millisecond.
func ms(d time.Duration) string {
	if d < time.Millisecond {
		return "<1ms"
	}
	return d.Round(time.Millisecond).String()
}
