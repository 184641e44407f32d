package main

// How each key a client was answered held for settled, and what the faults
// explain of it.

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// settlement counts how held keys settled.
type settlement struct {
	stillHeld, answeredThenHeld, resolved, released, replaced int
	// lostThenHeld: completed, then held at verification, because a failover
	// without wait_replicas promoted a replica that had the claim but not the
	// completion: the lost write left a lapsed claim, an unknown outcome (held,
	// not run again).
	lostThenHeld int
	// undone: held because a claim lapsed while its instance, alive, could
	// not undo a claim whose store call failed (answered 503, never sent);
	// the undo landed once the store took writes again, and the key then
	// ran once.
	undone int
	// falseHolds: held because a claim lapsed, though no instance died while
	// the key was in flight and its request never reached the upstream.
	falseHolds int
}

// settled counts how held key k settled, from its last answer a, and fails
// what no settlement explains (h.up.mu and h.seen.mu are held):
//   - still held at the end. In a reconcile round a key must settle, unless it
//     was answered first (by its instance, which was SIGKILLed before storing
//     that answer) and is simply held;
//   - resolved by reconcile: the lookup's 200, replayed; the key ran once, and
//     its answer is that execution;
//   - released by reconcile, then run once: two not-found lookups, and the one
//     execution began after the last of them;
//   - replaced by the late completion: held because its claim lapsed, then
//     replayed as the execution that was running when it was first held;
//   - released by its instance: held because its claim lapsed though no
//     instance died (a claim whose store call failed, answered 503, which its
//     instance undid once the store took writes again), then run once, after
//     the hold.
func (h *harness) settled(k string, a answer, st *settlement, failKey func(k, format string, args ...any)) {
	runs := h.up.effects[k]
	hk := h.seen.held[k]
	if hk != nil && hk.lapsed && h.up.calls[k] == 0 && !h.killedBetween(h.seen.sent[k], hk.first) {
		st.falseHolds++
		failKey(k, "held as a lapsed lease, though its request never reached the upstream and no instance was SIGKILLed between its first request (%s) and the hold (%s): a claim the instance gave up on (503), left to lapse",
			h.seen.sent[k].Format("15:04:05.000"), hk.first.Format("15:04:05.000"))
	}
	var lastNotFound time.Time
	var notFound int
	for _, l := range h.up.lookups[k] {
		if !l.found {
			notFound++
			lastNotFound = l.at
		}
	}
	switch {
	case a.unknown:
		st.stillHeld++
		id, completed := h.seen.first[k]
		switch {
		case h.reconcile:
			failKey(k, "still held %v after the load, on a reconcile route", h.settle())
		case completed && h.killedAfterAnswering(k, id):
			st.answeredThenHeld++
		case completed && h.completionLost(k, id):
			st.lostThenHeld++
		case completed:
			failKey(k, "completed as %d, then held at verification, and no SIGKILL of its instance explains it", id)
		}
	case !a.done():
		failKey(k, "held, then no final answer at verification (%d, %v)", a.status, a.err)
	case a.status == http.StatusOK:
		st.resolved++
		if len(runs) != 1 || runs[0].id != a.id {
			failKey(k, "resolved by reconcile as %d, but ran %d times", a.id, len(runs))
		}
	case len(runs) != 1:
		// a double run, failed above
	case notFound >= 2 && runs[0].start.After(lastNotFound):
		st.released++
	case hk != nil && hk.lapsed && a.replayed && runs[0].start.Before(hk.first):
		st.replaced++
	case hk != nil && hk.lapsed && runs[0].start.After(hk.first) && !h.killedBetween(h.seen.sent[k], hk.first):
		st.undone++
	default:
		failKey(k, "held, then answered %d (execution %d, replayed %v) without a release (%d not-found lookups)", a.status, a.id, a.replayed, notFound)
	}
}

// killedBetween reports whether an instance was SIGKILLed between from and to.
func (h *harness) killedBetween(from, to time.Time) bool {
	h.faults.mu.Lock()
	defer h.faults.mu.Unlock()
	for _, f := range h.faults.faults {
		if f.kind == "sigkill" && !f.from.Before(from) && f.from.Before(to) {
			return true
		}
	}
	return false
}

// killedAfterAnswering reports whether the instance that ran key's execution
// id was SIGKILLed after it while its answer could still be unstored: within a
// lease of its end, or during (or within 2 s after) a store outage that began
// by then, when its completion was being retried in the background. It
// answered the client, and its answer died with it (h.up.mu is held).
func (h *harness) killedAfterAnswering(key string, id int64) bool {
	for _, e := range h.up.effects[key] {
		if e.id != id {
			continue
		}
		h.faults.mu.Lock()
		defer h.faults.mu.Unlock()
		for _, f := range h.faults.faults {
			if f.kind != "sigkill" || f.target != e.instance || f.from.Before(e.start) {
				continue
			}
			if f.from.Before(e.end.Add(h.lease)) {
				return true
			}
			for _, o := range h.faults.faults {
				if (o.kind == "postgres-down" || o.kind == "redis-down") && o.from.Before(e.end.Add(h.lease)) &&
					o.from.Before(f.from) && f.from.Before(o.to.Add(2*time.Second)) {
					return true
				}
			}
		}
	}
	return false
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

// explain says why a key could run again after effect e, or "". Only a store
// that lost data explains a double run: a Sentinel failover that promoted a
// replica which had not received the latest writes (Redis replicates
// asynchronously), when the instances do not wait for a replica's
// acknowledgement. An instance SIGKILLed or a store down at completion holds the
// key instead (a lapsed claim is an unknown outcome): a double run from either
// fails the run.
func (h *harness) explain(e effect) string {
	h.faults.mu.Lock()
	defer h.faults.mu.Unlock()
	for _, f := range h.faults.faults {
		if f.kind == "failover" && !h.waited && e.start.Before(f.to) && e.end.After(f.from.Add(-time.Second)) {
			return "failover lost an unreplicated write"
		}
	}
	return ""
}

// completionLost reports whether the execution id of k ended in a failover
// that may have lost its completion (see explain): the new primary holds the
// claim without the answer, so the key is held once its claim lapses.
func (h *harness) completionLost(k string, id int64) bool {
	for _, e := range h.up.effects[k] {
		if e.id == id {
			return h.explain(e) != ""
		}
	}
	return false
}

// byCause prints double runs by cause: "" when there are none.
func byCause(reasons map[string]int) string {
	if len(reasons) == 0 {
		return ""
	}
	causes := make([]string, 0, len(reasons))
	for why, n := range reasons {
		causes = append(causes, fmt.Sprintf("%s: %d", why, n))
	}
	sort.Strings(causes)
	return " (" + strings.Join(causes, ", ") + ")"
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
