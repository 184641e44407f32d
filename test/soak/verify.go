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

// verify asks once more about every key a client completed, was answered held
// for, or the upstream executed or was asked about (lookups), and returns the
// last answer for each. A key still held is asked again each second within the
// settle window: a pending completion may still land, a reconcile may still
// settle it.
func (h *harness) verify() map[string]answer {
	keys := map[string]bool{}
	h.seen.mu.Lock()
	for k := range h.seen.first {
		keys[k] = true
	}
	for k := range h.seen.held {
		keys[k] = true
	}
	h.seen.mu.Unlock()
	h.up.mu.Lock()
	for k := range h.up.effects {
		keys[k] = true
	}
	for k := range h.up.lookups {
		keys[k] = true
	}
	h.up.mu.Unlock()
	todo := make([]string, 0, len(keys))
	for k := range keys {
		todo = append(todo, k)
	}
	sort.Strings(todo)
	final := map[string]answer{}
	settleBy := time.Now().Add(h.settle())
	for pass := 0; len(todo) > 0; pass++ {
		if pass > 0 {
			if time.Now().After(settleBy) {
				break
			}
			time.Sleep(time.Second)
		}
		var mu sync.Mutex
		var held []string
		sem := make(chan struct{}, 16)
		var wg sync.WaitGroup
		for _, k := range todo {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				a := h.ask(k)
				mu.Lock()
				defer mu.Unlock()
				final[k] = a
				if a.unknown {
					held = append(held, k)
				}
			}()
		}
		wg.Wait()
		sort.Strings(held)
		todo = held
	}
	return final
}

// settle is how long verification waits for held keys to settle.
func (h *harness) settle() time.Duration {
	if h.reconcile {
		return 20 * time.Second
	}
	return 3 * time.Second
}

// ask sends key until the answer is final: a completion, a held answer, or
// anything but 409, 503 or a connection error; 50 attempts at most.
func (h *harness) ask(k string) answer {
	h.seen.mu.Lock()
	body := h.seen.body[k]
	h.seen.mu.Unlock()
	var a answer
	for attempt := 0; attempt < 50; attempt++ {
		a = h.send(context.Background(), k, body)
		if a.done() || a.err == nil && a.status != http.StatusConflict && a.status != http.StatusServiceUnavailable {
			return a
		}
		time.Sleep(100 * time.Millisecond)
	}
	return a
}

// check compares the upstream's effects and lookups with the faults and with
// what clients were answered, and prints the phase's summary.
func (h *harness) check(final map[string]answer) error {
	h.up.mu.Lock()
	defer h.up.mu.Unlock()
	h.seen.mu.Lock()
	defer h.seen.mu.Unlock()
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var failed []string // keys with a problem, whose runs are printed
	failKey := func(k, format string, args ...any) {
		fail(k+": "+format, args...)
		failed = append(failed, k)
	}

	// Double runs: a key executed more than once. Only a store that lost data
	// explains one (explain); anything else fails the run.
	var effects, doubles int
	reasons := map[string]int{}
	explainedKeys := map[string]bool{}
	var actResetKeys, actResetTwice int
	for key, list := range h.up.effects {
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
			doubles++
			if why := h.explain(list[i-1]); why != "" {
				reasons[why]++
				explainedKeys[key] = true
			} else {
				reasons["unexplained"]++
				failKey(key, "ran %d times", len(list))
			}
		}
	}
	if actResetTwice > 0 {
		fail("%d keys ran again after the upstream acted and reset", actResetTwice)
	}

	// Completed keys: the verification answer replays the first one a client got.
	var lost, differing, lostExplained int
	for key, firstID := range h.seen.first {
		a := final[key]
		switch {
		case a.done() && !a.replayed:
			if explainedKeys[key] {
				lostExplained++
			} else {
				lost++
				failKey(key, "completed as %d, then ran again at verification as %d", firstID, a.id)
			}
		case a.done() && a.id != firstID:
			if explainedKeys[key] && h.ranAs(key, a.id) {
				lostExplained++
			} else {
				differing++
				failKey(key, "first answered %d, replayed %d", firstID, a.id)
			}
		case a.done(), a.unknown: // the replay; held: settled below
		default:
			lost++
			failKey(key, "completed as %d, then no replay at verification (%d, %v)", firstID, a.status, a.err)
		}
	}
	// Clients must have seen one answer per key, unless it ran twice for an
	// explained reason.
	var differingAnswers int
	for key, ids := range h.seen.ids {
		if len(ids) > 1 && (len(ids) > len(h.up.effects[key]) || !explainedKeys[key]) {
			differingAnswers++
			failKey(key, "answered with %d different executions", len(ids))
		}
	}

	// Held keys: how each settled.
	var st settlement
	heldKeys := map[string]bool{}
	var lapsed, reset int
	for k, hk := range h.seen.held {
		heldKeys[k] = true
		if hk.lapsed {
			lapsed++
		} else {
			reset++
		}
	}
	for k := range h.up.lookups {
		heldKeys[k] = true
	}
	var found, notFound int
	for _, list := range h.up.lookups {
		for _, l := range list {
			if l.found {
				found++
			} else {
				notFound++
			}
		}
	}
	for k := range heldKeys {
		h.settled(k, final[k], &st, failKey)
	}

	fidelityLines, fidelityKinds := h.fidelityReport(failKey)
	sutLines, sutWithFault, sutWithout := h.sutErrorReport()

	completed := len(h.seen.first)
	s := &h.st
	fmt.Printf(`
soak summary: %s
  requests sent                 %d
  operations completed          %d (keys executed upstream: %d)
  upstream calls                %d (effects %d; resets %d and 5xx %d before any effect; %d abandoned by a killed instance, no effect)
  replays served                %d (and %d of a reconcile's stored answer)
  409 in flight                 %d
  422 key reuse (probes)        %d
  503 store unavailable         %d
  502/504 upstream unavailable  %d
  outcome unknown (held)        %d answers
  held keys                     %d: %d sent, then no answer; %d lease lapsed (%d lapsed leases found, in the instances' logs)
    still held at the end       %d (%d of them answered first by an instance SIGKILLed before it stored the answer; %d whose completion a failover lost)
    resolved by reconcile       %d (each ran once; the stored answer names that execution)
    released by reconcile       %d (never ran before the last not-found; ran once after it)
    replaced, late completion   %d (held when its lease lapsed; then the first execution's answer)
    released by its instance    %d (a claim whose store call failed, never sent; undone once the store took writes, then ran once)
    false holds                 %d (a lapsed lease, though never sent upstream and no instance was killed)
  reconcile lookups             %d found, %d not found
  acted, then reset             %d keys (each one a double run when failures released the key): ran again %d
  500 from the upstream         %d
  connection errors             %d
  client hang-ups               %d
  double executions             %d%s
  lost completed records        %d (and %d re-run after a failover lost the write)
  differing answers             %d (at verification: %d)
  key reuse that ran            %d
  unexpected answers            %d
  replays not byte-identical    %d%s
  instances' own 5xx            %d (%d with a fault active; %d without)
`, h.name, s.requests.Load(), completed, len(h.up.effects), h.up.attempts.Load(), effects, h.up.resets.Load(), h.up.errors.Load(), h.up.aborted.Load(),
		s.replays.Load(), s.resolvedReplays.Load(), s.conflicts.Load(), s.mismatches.Load(), s.unavailable.Load(), s.badGateway.Load(),
		s.unknownAnswers.Load(), len(heldKeys), reset, lapsed, h.logged(lapsedLog),
		st.stillHeld, st.answeredThenHeld, st.lostThenHeld, st.resolved, st.released, st.replaced, st.undone, st.falseHolds, found, notFound,
		actResetKeys, actResetTwice, s.upstream5xx.Load(), s.connErrors.Load(), s.hangups.Load(), doubles, byCause(reasons),
		lost, lostExplained, differingAnswers, differing, s.mismatchViolations.Load(), s.unexpected.Load(),
		len(h.seen.fidelity), byCause(fidelityKinds), len(h.seen.sutErrors), sutWithFault, sutWithout)
	for _, l := range append(fidelityLines, sutLines...) {
		fmt.Println("  " + l)
	}
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
		if len(h.faults.faults) <= 30 || f.kind != "caddy-reload" && f.kind != "sighup" {
			fmt.Printf("  fault %-20s %-16s %s … %s\n", f.kind, f.target, f.from.Format("15:04:05.000"), f.to.Format("15:04:05.000"))
		}
	}
	h.faults.mu.Unlock()

	for _, k := range first(failed, 5) {
		for _, e := range h.up.effects[k] {
			fail("  %s ran as %d on %s from %s to %s", k, e.id, e.instance, e.start.Format("15:04:05.000"), e.end.Format("15:04:05.000"))
		}
		for _, l := range h.up.lookups[k] {
			fail("  %s looked up at %s: found %v", k, l.at.Format("15:04:05.000"), l.found)
		}
		if hk := h.seen.held[k]; hk != nil {
			fail("  %s first answered held at %s (lapsed lease: %v)", k, hk.first.Format("15:04:05.000"), hk.lapsed)
		}
	}
	if n := s.mismatchViolations.Load(); n > 0 {
		fail("%d reused keys with another payload were executed", n)
	}
	if n := s.unexpected.Load(); n > 0 {
		fail("%d unexpected answers", n)
	}
	if completed < 100 {
		fail("only %d operations completed: the soak did not exercise anything", completed)
	}
	if len(problems) > 0 {
		if len(problems) > 40 {
			problems = append(problems[:40], fmt.Sprintf("… and %d more", len(problems)-40))
		}
		return fmt.Errorf("FAIL:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}
