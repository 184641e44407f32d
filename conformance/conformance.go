// Package conformance is a black-box suite for servers that enforce the
// Idempotency-Key header (draft-ietf-httpapi-idempotency-key-header): it sends
// real requests to a target, a proxy in front of an API or the API itself, and
// reports, per check, what it saw and whether the target did what the draft
// (or a named promise of idempotency layers) says. `idemproxy conformance` is
// its command; docs/conformance.md describes each check.
//
// The target needs one thing: a route that creates something on POST and says
// so in its answer (a new id each execution, a timestamp: any body that
// differs from one execution to the next). The suite tells a replay from a
// second execution by the body: a replay is byte for byte the first answer,
// another execution answers another body. Run makes sure it can tell them
// apart before any check: two POSTs with two fresh keys must answer 2xx with
// different bodies.
//
// The package uses net/http alone.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Level is how strict a run is: which checks are required.
type Level string

const (
	// Draft requires what the draft's text names a status or an answer for
	// (§2.6, §2.7): replay, 409 in flight, one execution for concurrent
	// duplicates, 422, 400 for a missing key. The rest is advisory.
	Draft Level = "draft"
	// Strict also requires what the draft recommends without naming an
	// answer, and what an idempotency layer promises to make retries safe:
	// invalid keys refused, problem+json error bodies, keys scoped by
	// credential. It is the default.
	Strict Level = "strict"
)

// Defaults of Config's zero fields.
const (
	DefaultBody         = `{"amount":1000,"currency":"usd"}`
	DefaultOtherBody    = `{"amount":2000,"currency":"usd"}`
	DefaultContentType  = "application/json"
	DefaultKeyHeader    = "Idempotency-Key"
	DefaultMaxKeyLength = 255
	DefaultConcurrency  = 10
	DefaultTimeout      = 30 * time.Second
)

// Config is what a run sends and where. Zero fields take the defaults above.
type Config struct {
	// Target is the base URL of the server under test (http://host:port).
	Target string
	// Path is the route that creates something on POST, relative to Target
	// (a query allowed); empty: Target's own path.
	Path string
	// SlowPath is a route (relative to Target) whose POST takes long enough
	// (a second is plenty) for a repeat to arrive while it runs, e.g. the
	// demo API's /charges?delay=1s. Empty: Path, which then must be slow
	// enough by itself, or the in-flight check is skipped.
	SlowPath string
	// TimeoutPath is a route (relative to Target) whose POST outlives the
	// target's own deadline, so that the first request gets no answer from
	// the API (a proxy's upstream timeout). Empty: the unknown-outcome check
	// is skipped.
	TimeoutPath string
	// Header is sent with every request (credentials, a Host).
	Header http.Header
	// OtherHeader holds another credential, sent in place of Header's
	// values of the same names by the credential-scope check. Empty: if
	// Header has no Authorization, the check makes up two bearer tokens;
	// else it is skipped.
	OtherHeader http.Header
	// Body and OtherBody are two different request bodies the route
	// accepts, with ContentType.
	Body, OtherBody string
	ContentType     string
	// KeyHeader is the key's request header.
	KeyHeader string
	// BareKeys sends keys as bare text (a UUID, as Stripe takes them)
	// instead of the draft's sf-string ("…", §2.1).
	BareKeys bool
	// KeyOptional says the route runs requests without a key (no 400 is
	// due): the missing-key check is not applicable.
	KeyOptional bool
	// MaxKeyLength is the longest key the target accepts; the invalid-key
	// check sends one character more.
	MaxKeyLength int
	// Concurrency is how many duplicates the concurrent check sends at once.
	Concurrency int
	// Expiry is the target's published key expiry (draft §2.3). Zero: the
	// expiry check is skipped; else it waits that long (in parallel with
	// the other checks).
	Expiry time.Duration
	// Level picks the required checks; empty: Strict.
	Level Level
	// Timeout bounds each request; zero: DefaultTimeout.
	Timeout time.Duration
	// Client sends the requests; nil: a client of its own.
	Client *http.Client
}

// Status is a check's outcome.
type Status string

const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP" // could not be run: Saw says why and what would let it run
)

// Result is one check's outcome.
type Result struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Section  string `json:"section"` // the draft's section, or the promise it holds
	Required bool   `json:"required"`
	Status   Status `json:"status"`
	Saw      string `json:"saw"` // what the target answered
}

// Report is a run's outcome.
type Report struct {
	Target  string   `json:"target"`
	Level   Level    `json:"level"`
	Run     string   `json:"run"` // the run's id, in every key it sent
	Results []Result `json:"results"`
	Passed  int      `json:"passed"`
	Failed  int      `json:"failed"`
	Skipped int      `json:"skipped"`
	// OK: every required check passed.
	OK bool `json:"ok"`
}

// Failing returns the ids of the checks that failed, required or not.
func (r Report) Failing() []string {
	var ids []string
	for _, res := range r.Results {
		if res.Status == Fail {
			ids = append(ids, res.ID)
		}
	}
	return ids
}

// ErrUnsuitable is returned (wrapped) by Run when the target cannot be tested:
// its route does not answer 2xx, or two executions cannot be told apart.
var ErrUnsuitable = errors.New("target unsuitable")

// Run runs every check against cfg's target. Its error is a bad Config or an
// unsuitable target (ErrUnsuitable); what the checks found is in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	s, err := newSuite(cfg)
	if err != nil {
		return Report{}, err
	}
	if err := s.calibrate(ctx); err != nil {
		return Report{}, err
	}
	// expiry waits: it runs beside the others, on its own keys.
	var expiry Result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); expiry = s.run(ctx, checkExpiry) }()
	rep := Report{Target: s.url(s.cfg.Path), Level: s.cfg.Level, Run: s.runID}
	for _, c := range checks {
		if c.id == checkExpiry.id {
			wg.Wait()
			rep.Results = append(rep.Results, expiry)
			continue
		}
		rep.Results = append(rep.Results, s.run(ctx, c))
	}
	wg.Wait()
	rep.OK = true
	for _, res := range rep.Results {
		switch res.Status {
		case Pass:
			rep.Passed++
		case Fail:
			rep.Failed++
		case Skip:
			rep.Skipped++
		}
		if res.Required && res.Status != Pass {
			rep.OK = false
		}
	}
	return rep, nil
}

// suite is one run: its configuration, its id, and the error answers the
// checks saw (the problem-json check reads them).
type suite struct {
	cfg     Config
	base    *url.URL
	runID   string
	latency time.Duration // the quicker of calibration's two answers

	mu     sync.Mutex
	n      int
	errors []seen
}

// seen is an error answer a check expected, kept for problem-json.
type seen struct {
	check string
	resp  *response
}

func newSuite(cfg Config) (*suite, error) {
	if cfg.Target == "" {
		return nil, errors.New("no target URL")
	}
	base, err := url.Parse(cfg.Target)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("target %q: want an http:// or https:// URL", cfg.Target)
	}
	if cfg.Path == "" {
		cfg.Path = base.Path
		if base.RawQuery != "" {
			cfg.Path += "?" + base.RawQuery
		}
	}
	base.Path, base.RawPath, base.RawQuery = "", "", ""
	for _, p := range []*string{&cfg.Path, &cfg.SlowPath, &cfg.TimeoutPath} {
		if *p != "" && !strings.HasPrefix(*p, "/") {
			*p = "/" + *p
		}
	}
	if cfg.Path == "" {
		cfg.Path = "/"
	}
	if cfg.Body == "" {
		cfg.Body = DefaultBody
	}
	if cfg.OtherBody == "" {
		cfg.OtherBody = DefaultOtherBody
	}
	if cfg.Body == cfg.OtherBody {
		return nil, errors.New("the body and the other body are the same")
	}
	if cfg.ContentType == "" {
		cfg.ContentType = DefaultContentType
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = DefaultKeyHeader
	}
	if cfg.MaxKeyLength <= 0 {
		cfg.MaxKeyLength = DefaultMaxKeyLength
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Concurrency < 2 {
		return nil, errors.New("concurrency: at least 2")
	}
	switch cfg.Level {
	case "":
		cfg.Level = Strict
	case Draft, Strict:
	default:
		return nil, fmt.Errorf("level %q: want %s or %s", cfg.Level, Draft, Strict)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: 64,
		}}
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return &suite{cfg: cfg, base: base, runID: hex.EncodeToString(id)}, nil
}

// run runs one check and gives it its place, title and level.
func (s *suite) run(ctx context.Context, c check) Result {
	res := c.fn(ctx, s)
	res.ID, res.Title, res.Section = c.id, c.title, c.section
	res.Required = c.required(s.cfg)
	return res
}

// key returns a key no request has used: random bytes, a counter, and the
// run's id, in a UUID's shape (8-4-4-4-12 hex digits, version 4) since some
// servers take nothing else; runs never collide.
func (s *suite) key() string {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	r := make([]byte, 7)
	_, _ = rand.Read(r)
	return fmt.Sprintf("%x-%04x-4%03x-a%03x-%s", r[:4], n&0xffff, int(r[4])<<4|int(r[6]>>4), int(r[5])<<4|int(r[6]&0xf), s.runID)
}

// keyValue is key as the header carries it: an sf-string, or bare.
func (s *suite) keyValue(key string) string {
	if s.cfg.BareKeys {
		return key
	}
	return `"` + key + `"`
}

// expectError keeps an error answer a check expected (400, 409, 422) for
// the problem-json check.
func (s *suite) expectError(check string, r *response) {
	if r == nil || r.err != nil || r.status < 400 {
		return
	}
	s.mu.Lock()
	s.errors = append(s.errors, seen{check, r})
	s.mu.Unlock()
}

// calibrate checks the target can be tested: two POSTs with fresh keys both
// answer 2xx, with bodies that differ.
func (s *suite) calibrate(ctx context.Context) error {
	a := s.post(ctx, post{path: s.cfg.Path, key: s.key()})
	b := s.post(ctx, post{path: s.cfg.Path, key: s.key()})
	for _, r := range []*response{a, b} {
		if r.err != nil {
			return fmt.Errorf("%w: POST %s: %v", ErrUnsuitable, s.url(s.cfg.Path), r.err)
		}
		if !r.ok() {
			return fmt.Errorf("%w: POST %s with a fresh key answered %s; it must create something (2xx): check --path, --body, --content-type, --header (credentials), and the key's form (--key-header, --bare-keys)",
				ErrUnsuitable, s.url(s.cfg.Path), r.short())
		}
	}
	if a.body == b.body {
		return fmt.Errorf("%w: two POSTs to %s with two fresh keys answered the same body (%s): the suite tells executions apart by the body, so the route must answer something new each time it runs (a new id)",
			ErrUnsuitable, s.url(s.cfg.Path), clip(a.body, 80))
	}
	s.latency = min(a.took, b.took)
	return nil
}

// url is the target's URL of a path (with its query).
func (s *suite) url(path string) string {
	return strings.TrimSuffix(s.base.String(), "/") + path
}
