package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemproxy/idemproxy/internal/faultproxy"
)

// fault is one scheduled fault, kept for explaining duplicates.
type fault struct {
	kind     string // "sigkill", "sigterm", "redis-down", "upstream-slow", …
	target   string // the instance address, for process faults
	from, to time.Time
}

type faultLog struct {
	mu     sync.Mutex
	faults []fault
}

func (f *faultLog) add(x fault) {
	f.mu.Lock()
	f.faults = append(f.faults, x)
	f.mu.Unlock()
}

// stats counts what clients saw.
type stats struct {
	requests, replays, conflicts, mismatches, unavailable, badGateway, upstream5xx atomic.Int64
	// resolvedReplays: the 200 a reconcile stored for a held key, replayed.
	resolvedReplays atomic.Int64
	// unknownAnswers: answers with the outcome-unknown problem (the key is held).
	unknownAnswers                                      atomic.Int64
	connErrors, hangups, mismatchViolations, unexpected atomic.Int64
}

// seen is what clients were answered with, per key.
type seen struct {
	mu    sync.Mutex
	first map[string]int64          // first execution id a client got for the key
	ids   map[string]map[int64]bool // every execution id clients got for the key
	body  map[string]string         // the request body of the key
	sent  map[string]time.Time      // when the key was first sent
	held  map[string]*heldKey       // keys a client was answered held
	// ref: the key's reference answer (refOwn: the first execution's own, not
	// a replay); fidelity: completed answers that differ from it; sutErrors:
	// the 5xx the instances made themselves (fidelity.go).
	ref       map[string]answer
	refOwn    map[string]bool
	fidelity  []fidelity
	sutErrors []sutError
}

// heldKey is a key some client was answered outcome-unknown for.
type heldKey struct {
	first  time.Time // the first such answer
	lapsed bool      // that answer said the first execution's claim lapsed
}

func (s *seen) hold(key string, lapsed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[key] == nil {
		s.held[key] = &heldKey{first: time.Now(), lapsed: lapsed}
	}
}

func (s *seen) record(key string, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.first[key]; !ok {
		s.first[key] = id
	}
	if s.ids[key] == nil {
		s.ids[key] = map[int64]bool{}
	}
	s.ids[key][id] = true
}

type harness struct {
	cfg      config
	name     string        // the phase, for its summary
	duration time.Duration // this phase's load
	up       *upstream
	proxies  []*managed
	prefixes []string // each instance's path prefix on the upstream, which names it in the effects
	redis    *managed
	net      *faultproxy.Proxy // between the instances and Redis, when the phase has one
	// waited: the instances wait for a replica's acknowledgement of every write,
	// so a failover explains no double run.
	waited bool
	// reconcile: the instances route the soak's path with a reconcile request
	// (GET /lookup?key={key}), so held keys settle: resolved, or released and
	// run once.
	reconcile bool
	lease     time.Duration // the instances' lock_ttl
	client    *http.Client
	faults    faultLog
	st        stats
	seen      seen
	deadline  time.Time
	// followers: the background follow-ups of keys answered held.
	followers sync.WaitGroup
}

func newHarness(cfg config, name string, d time.Duration) (*harness, error) {
	h := &harness{cfg: cfg, name: name, duration: d, lease: soakLease, seen: seen{first: map[string]int64{}, ids: map[string]map[int64]bool{}, body: map[string]string{}, sent: map[string]time.Time{}, held: map[string]*heldKey{},
		ref: map[string]answer{}, refOwn: map[string]bool{}}}
	h.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}
	var err error
	h.up, err = startUpstream()
	return h, err
}

// phase is one round of the soak, with its own servers.
type phase struct {
	name string
	run  func(config, string) error
}

// phases are the soak's phases, in the order they run: the main fault schedule
// on three instances, Sentinel failovers, Caddy reloaded under load, and
// PostgreSQL restarted under load.
var phases = []phase{{"main", mainPhase}, {"failover", failoverPhase}, {"reload", reloadPhase}, {"postgres", postgresPhase}, {"reconcile", reconcilePhase}}

// phaseNames lists the phases' names, for -phases's help and its errors.
func phaseNames() string {
	var names []string
	for _, p := range phases {
		names = append(names, p.name)
	}
	return strings.Join(names, ", ")
}

// pickPhases returns the phases spec names (comma-separated; empty: every
// phase), in the order they run. A name that is no phase is an error: a typo
// must not make a soak that runs nothing and passes.
func pickPhases(spec string) ([]phase, error) {
	if strings.TrimSpace(spec) == "" {
		return phases, nil
	}
	want := map[string]bool{}
	for _, name := range strings.Split(spec, ",") {
		name = strings.TrimSpace(name)
		if !slices.ContainsFunc(phases, func(p phase) bool { return p.name == name }) {
			return nil, fmt.Errorf("no phase %q; the phases are %s", name, phaseNames())
		}
		want[name] = true
	}
	var out []phase
	for _, p := range phases {
		if want[p.name] {
			out = append(out, p)
		}
	}
	return out, nil
}

// soak runs the phases picked one after another.
func soak(cfg config) error {
	dir, err := os.MkdirTemp("", "idemproxy-soak")
	if err != nil {
		return err
	}
	if os.Getenv("SOAK_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Printf("soak: logs kept in %s (SOAK_KEEP)\n", dir)
	}
	run, err := pickPhases(cfg.phases)
	if err != nil {
		return err
	}
	var failed []string
	for _, phase := range run {
		began := time.Now()
		if err := phase.run(cfg, dir); err != nil {
			fmt.Fprintf(os.Stderr, "soak: phase %s: %v\n", phase.name, err)
			failed = append(failed, phase.name)
		}
		fmt.Printf("soak: phase %s took %v\n", phase.name, time.Since(began).Round(time.Second))
	}
	if len(failed) > 0 {
		return fmt.Errorf("phases failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// round is one round of a phase, run with its name.
type round struct {
	name string
	run  func(name string) error
}

// parallel runs rounds side by side (each has its own servers, instances,
// upstream, clients and checker) and names those that failed.
func parallel(rounds []round) error {
	errs := make([]error, len(rounds))
	var wg sync.WaitGroup
	for i, r := range rounds {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.run(r.name) }()
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s: %v\n", rounds[i].name, err)
			failed = append(failed, rounds[i].name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, ", "))
	}
	return nil
}

// mainPhase: three instances share one Redis through a fault proxy, under the
// schedule of process, network, Redis and upstream faults.
func mainPhase(cfg config, dir string) error {
	h, err := newHarness(cfg, "main", cfg.duration)
	if err != nil {
		return err
	}
	if h.redis, err = newRedis(dir, "redis"); err != nil {
		return err
	}
	if err := h.redis.start(); err != nil {
		return err
	}
	defer h.redis.kill()
	// The instances reach Redis through a fault-injecting TCP proxy: the
	// schedule drops replies, adds latency, resets connections and holds them
	// half-open.
	if h.net, err = faultproxy.New(h.redis.addr); err != nil {
		return err
	}
	defer h.net.Close()
	for i := 0; i < 3; i++ {
		// Each instance forwards under its own path prefix, so the upstream knows
		// which one ran an operation.
		p := newProxy(dir, cfg.bin, fmt.Sprintf("idemproxy-%d", i), fmt.Sprintf("http://%s/i%d", h.up.addr, i), "redis://"+h.net.Addr()+"/0?dial_timeout=500ms&read_timeout=1s&write_timeout=1s&max_retries=1")
		if err := p.start(); err != nil {
			return err
		}
		defer p.kill()
		h.proxies, h.prefixes = append(h.proxies, p), append(h.prefixes, fmt.Sprintf("i%d", i))
	}
	fmt.Printf("soak: %v of load, %d clients, 3 instances on one Redis; faults on a schedule\n", h.duration, cfg.clients)
	return h.run(h.schedule)
}

// run drives the clients for the phase's duration while schedule injects faults,
// then verifies every completed key and checks the upstream's log of effects.
func (h *harness) run(schedule func(start time.Time) error) error {
	start := time.Now()
	h.deadline = start.Add(h.duration)
	schedDone := make(chan error, 1)
	go func() { schedDone <- schedule(start) }()
	var wg sync.WaitGroup
	for c := 0; c < h.cfg.clients; c++ {
		wg.Add(1)
		go func() { defer wg.Done(); h.clientLoop(c) }()
	}
	wg.Wait()
	schedErr := <-schedDone
	h.followers.Wait()
	if schedErr != nil {
		// Still verify and report what ran: the run fails either way.
		fmt.Printf("soak: %s: the fault schedule failed: %v\n", h.name, schedErr)
		schedErr = fmt.Errorf("fault schedule: %w", schedErr)
	}
	h.up.mode.Store(modeNormal)
	h.up.inFlight.Store(false)
	fmt.Printf("soak: %s: load done; verifying every completed key is replayed unchanged, and how held keys settled\n", h.name)
	return errors.Join(schedErr, h.check(h.verify()))
}

// redisDownFor is how long the main phase keeps Redis down (then its restart
// loads the append-only file): longer than the claim.
const redisDownFor = 5 * time.Second

// faultCycle is the length of one round of the fault schedule; a long run repeats it.
const faultCycle = 100 * time.Second

// schedule injects the faults, cycle after cycle, until the load ends.
func (h *harness) schedule(start time.Time) error {
	cycle := min(h.duration, faultCycle)
	for t := start; !t.Add(cycle).After(h.deadline); t = t.Add(cycle) {
		if err := h.faultRound(t, cycle); err != nil {
			return err
		}
	}
	return nil
}

// faultRound injects one of each fault at fractions of d from start.
func (h *harness) faultRound(start time.Time, d time.Duration) error {
	at := func(frac float64) {
		if wait := time.Until(start.Add(time.Duration(frac * float64(d)))); wait > 0 {
			time.Sleep(wait)
		}
	}
	mode := func(m int32, name string, from, to float64) {
		at(from)
		t := time.Now()
		h.up.mode.Store(m)
		at(to)
		h.up.mode.Store(modeNormal)
		h.faults.add(fault{kind: name, from: t, to: time.Now()})
	}
	netFault := func(name string, from, to float64, on, off func()) {
		at(from)
		t := time.Now()
		on()
		at(to)
		off()
		h.faults.add(fault{kind: name, from: t, to: time.Now()})
	}
	netFault("redis-lost-replies", 0.02, 0.05, func() { h.net.DropReplies(25) }, func() { h.net.DropReplies(0) })
	netFault("redis-latency", 0.05, 0.09, func() { h.net.SetLatency(150 * time.Millisecond) }, func() { h.net.SetLatency(0) })
	netFault("redis-resets", 0.09, 0.10, h.net.ResetAll, func() {})
	at(0.12)
	if err := h.sigkill(0); err != nil {
		return err
	}
	at(0.25)
	p := h.proxies[1]
	t := time.Now()
	if err := p.signal(syscall.SIGTERM, 20*time.Second); err != nil {
		return err
	}
	h.faults.add(fault{kind: "sigterm", target: "i1", from: t, to: time.Now()})
	if err := p.start(); err != nil {
		return err
	}
	// Half-open: connections stay up and carry nothing, for less than the 4s
	// lease (go-redis's 1s read timeout gives up on them first): 2s of a 100s
	// cycle, 1.2s of the 60s CI run.
	netFault("redis-half-open", 0.32, 0.34, func() { h.net.Blackhole(true) }, func() { h.net.Blackhole(false) })
	at(0.38)
	t = time.Now()
	if err := h.redis.signal(syscall.SIGTERM, 20*time.Second); err != nil { // Redis saves and exits
		return err
	}
	// Longer than the 4 s lease: a completion retried in the background meets
	// a retry that found its claim lapsed (held), and must replace that record.
	time.Sleep(redisDownFor)
	if err := h.redis.start(); err != nil {
		return err
	}
	h.faults.add(fault{kind: "redis-down", from: t, to: time.Now()})
	mode(modeSlow, "upstream-slow", 0.48, 0.60)
	mode(modeReset, "upstream-reset", 0.62, 0.72)
	mode(modeError, "upstream-5xx", 0.74, 0.80)
	mode(modeActReset, "upstream-act-reset", 0.80, 0.86)
	at(0.88)
	return h.sigkill(2)
}

// sigkill SIGKILLs instance i, mid-request under the load, and starts it again
// 1.5 s later. Its in-flight claims lapse: their keys are held.
func (h *harness) sigkill(i int) error {
	p := h.proxies[i]
	t := time.Now()
	p.kill()
	h.faults.add(fault{kind: "sigkill", target: h.prefixes[i], from: t, to: time.Now()})
	time.Sleep(1500 * time.Millisecond)
	return p.start()
}
