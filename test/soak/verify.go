package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// verify replays every completed key once more.
// diff is a verification replay that differs from the first answer for key.
type diff struct {
	key             string
	first, replayed int64
}

func (h *harness) verify() (lost []string, differing []diff) {
	h.seen.mu.Lock()
	keys := make([]string, 0, len(h.seen.first))
	for k := range h.seen.first {
		keys = append(keys, k)
	}
	h.seen.mu.Unlock()
	sort.Strings(keys)
	var mu sync.Mutex
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			h.seen.mu.Lock()
			body, first := h.seen.body[k], h.seen.first[k]
			h.seen.mu.Unlock()
			for attempt := 0; attempt < 50; attempt++ {
				a := h.send(context.Background(), k, body)
				if a.err != nil || a.status != http.StatusCreated {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				h.seen.record(k, a.id)
				mu.Lock()
				switch {
				case !a.replayed:
					lost = append(lost, k)
				case a.id != first:
					differing = append(differing, diff{k, first, a.id})
				}
				mu.Unlock()
				return
			}
			mu.Lock()
			lost = append(lost, k+" (no answer)")
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lost, differing
}

// check compares the upstream's effects with the faults and what clients saw.
func (h *harness) check(lost []string, differing []diff) error {
	h.up.mu.Lock()
	defer h.up.mu.Unlock()
	var effects, keys, explained, unexplained int
	// Keys whose upstream acted and then reset the connection: each one ran
	// twice when failures released the key. Now held, they must run once.
	var actResetKeys, actResetTwice int
	reasons := map[string]int{}
	var unexplainedKeys []string
	explainedKeys := map[string]bool{}
	for key, list := range h.up.effects {
		keys++
		effects += len(list)
		for i, e := range list {
			if e.actReset {
				actResetKeys++
				if i+1 < len(list) {
					actResetTwice++
				}
				break
			}
		}
		for i := 1; i < len(list); i++ {
			if why := h.explain(list[i-1]); why != "" {
				explained++
				reasons[why]++
				explainedKeys[key] = true
			} else {
				unexplained++
				unexplainedKeys = append(unexplainedKeys, key)
			}
		}
	}
	// A record "lost" at verification whose first execution could not be stored
	// (its instance was killed, or Redis was down until the lease lapsed) was never
	// a completed record: it is one of the explained duplicates above.
	var lostExplained int
	kept := lost[:0]
	for _, k := range lost {
		if explainedKeys[k] {
			lostExplained++
		} else {
			kept = append(kept, k)
		}
	}
	lost = kept
	// Likewise a verification replay that differs from the first answer a client got
	// is explained when that first answer was never stored (the key ran again for an
	// explained reason), provided what is replayed is one of the key's real runs.
	var differingExplained int
	keptDiff := differing[:0]
	for _, d := range differing {
		if explainedKeys[d.key] && h.ranAs(d.key, d.replayed) {
			differingExplained++
		} else {
			keptDiff = append(keptDiff, d)
		}
	}
	differing = keptDiff
	// Clients must have seen one answer per key, unless the key ran twice for an
	// explained reason.
	var differingAnswers []string
	h.seen.mu.Lock()
	for key, ids := range h.seen.ids {
		if len(ids) > 1 && len(ids) > len(h.up.effects[key]) || len(ids) > 1 && len(h.up.effects[key]) <= 1 {
			differingAnswers = append(differingAnswers, key)
		}
	}
	completed := len(h.seen.first)
	h.seen.mu.Unlock()

	s := &h.st
	fmt.Printf(`
soak summary: %s
  requests sent                 %d
  operations completed          %d (keys executed upstream: %d)
  upstream calls                %d (effects %d; resets %d and 5xx %d before any effect)
  replays served                %d
  409 in flight                 %d
  422 key reuse (probes)        %d
  503 store unavailable         %d
  502/504 upstream unavailable  %d
  502/504 outcome unknown       %d answers, %d keys held (sent, then reset: never run twice)
  acted, then reset             %d keys (each one a double run when failures released the key): ran again %d
  500 from the upstream         %d
  connection errors             %d
  client hang-ups               %d
  duplicate executions          %d unexplained, %d explained %v
  lost completed records        %d (and %d never stored, counted in the explained duplicates)
  differing answers             %d (at verification: %d, and %d after an explained re-run)
  key reuse that ran            %d
  unexpected answers            %d
`, h.name, s.requests.Load(), completed, keys, h.up.attempts.Load(), effects, h.up.resets.Load(), h.up.errors.Load(),
		s.replays.Load(), s.conflicts.Load(), s.mismatches.Load(), s.unavailable.Load(), s.badGateway.Load(),
		s.unknownAnswers.Load(), s.unknownOutcomes.Load(), actResetKeys, actResetTwice, s.upstream5xx.Load(), s.connErrors.Load(), s.hangups.Load(), unexplained, explained, reasons,
		len(lost), lostExplained, len(differingAnswers), len(differing), differingExplained, s.mismatchViolations.Load(), s.unexpected.Load())
	if h.net != nil {
		fmt.Printf("  Redis replies dropped         %d (instances to Redis, through the fault proxy)\n", h.net.Dropped())
	}
	h.faults.mu.Lock()
	byKind := map[string]int{}
	for _, f := range h.faults.faults {
		byKind[f.kind]++
	}
	fmt.Printf("  faults                        %d %v\n", len(h.faults.faults), byKind)
	for _, f := range h.faults.faults {
		if len(h.faults.faults) <= 30 || f.kind != "caddy-reload" {
			fmt.Printf("  fault %-20s %-16s %s … %s\n", f.kind, f.target, f.from.Format("15:04:05.000"), f.to.Format("15:04:05.000"))
		}
	}
	h.faults.mu.Unlock()

	var problems []string
	if unexplained > 0 {
		problems = append(problems, fmt.Sprintf("%d unexplained duplicate executions (keys %v)", unexplained, first(unexplainedKeys, 5)))
		for _, k := range first(unexplainedKeys, 5) {
			for _, e := range h.up.effects[k] {
				problems = append(problems, fmt.Sprintf("  %s ran as %d on %s from %s to %s", k, e.id, e.instance, e.start.Format("15:04:05.000"), e.end.Format("15:04:05.000")))
			}
		}
	}
	if actResetTwice > 0 {
		problems = append(problems, fmt.Sprintf("%d keys ran again after the upstream acted and reset", actResetTwice))
	}
	if len(lost) > 0 {
		problems = append(problems, fmt.Sprintf("%d completed records lost (keys %v)", len(lost), first(lost, 5)))
	}
	if len(differing) > 0 {
		keys := make([]string, 0, 5)
		for _, d := range differing[:min(5, len(differing))] {
			keys = append(keys, fmt.Sprintf("%s: first %d, replayed %d", d.key, d.first, d.replayed))
		}
		problems = append(problems, fmt.Sprintf("%d replays differ from the first answer (%v)", len(differing), keys))
	}
	if len(differingAnswers) > 0 {
		problems = append(problems, fmt.Sprintf("%d keys answered with more distinct results than explained executions (keys %v)", len(differingAnswers), first(differingAnswers, 5)))
	}
	if n := s.mismatchViolations.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d reused keys with another payload were executed", n))
	}
	if n := s.unexpected.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d unexpected answers", n))
	}
	if completed < 100 {
		problems = append(problems, fmt.Sprintf("only %d operations completed: the soak did not exercise anything", completed))
	}
	if len(problems) > 0 {
		return fmt.Errorf("FAIL:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// ranAs reports whether id is one of key's executions (h.up.mu is held).
func (h *harness) ranAs(key string, id int64) bool {
	for _, e := range h.up.effects[key] {
		if e.id == id {
			return true
		}
	}
	return false
}

// explain says why a key could run again after effect e, or "".
//   - the instance running e was SIGKILLed before it could store the response: the
//     lock lapses after its lease and the retry runs (documented);
//   - Redis was down when e completed: the response could not be stored, and the
//     key ran again once Redis was back (documented).
func (h *harness) explain(e effect) string {
	h.faults.mu.Lock()
	defer h.faults.mu.Unlock()
	for _, f := range h.faults.faults {
		switch f.kind {
		case "sigkill":
			if f.target == e.instance && !f.from.Before(e.start.Add(-100*time.Millisecond)) && f.from.Before(e.end.Add(time.Second)) {
				return "instance killed before storing"
			}
		case "failover":
			// Redis replicates asynchronously: a claim or a stored response the
			// killed primary acknowledged but had not yet sent to the replica is
			// gone after the promotion. Not when every write waited for the replica.
			if !h.waited && e.start.Before(f.to) && e.end.After(f.from.Add(-time.Second)) {
				return "failover lost an unreplicated write"
			}
		case "postgres-down":
			if f.to.Sub(f.from) > h.lease && e.end.After(f.from.Add(-time.Second)) && e.end.Before(f.to.Add(time.Second)) {
				return "PostgreSQL down past the lease at completion"
			}
		case "redis-down":
			if e.end.After(f.from.Add(-time.Second)) && e.end.Before(f.to.Add(time.Second)) {
				return "Redis down at completion"
			}
		}
	}
	return ""
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
