package main

// Replay fidelity and the instances' own 5xx: every completed answer a client
// gets for a key (the first execution's, each replay, the verification's) must
// be the same bytes, status and end-to-end headers; and each 5xx an instance
// made itself (not the upstream's 500) is named with the faults active when it
// was made. The report says what each one was.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// digest is a short digest of a body, for the report.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// perAnswer are the headers that differ between a first answer and its replay
// by design: Idempotent-Replayed marks the replay.
var perAnswer = []string{"Idempotent-Replayed"}

// headerLines is h as sorted "Name: value" lines, without perAnswer's.
func headerLines(h http.Header) []string {
	var out []string
	for k, vs := range h {
		if slices.Contains(perAnswer, k) {
			continue
		}
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	sort.Strings(out)
	return out
}

// same reports whether b is a faithful replay of a: status, end-to-end
// headers and body bytes.
func same(a, b answer) bool {
	return a.status == b.status && a.digest == b.digest && slices.Equal(headerLines(a.header), headerLines(b.header))
}

// fidelity is a completed answer that differs from the key's reference answer
// (the first execution's own answer a client got, or the first replay when no
// client got that).
type fidelity struct {
	key         string
	ref, replay answer
	refOwn      bool // ref is the first execution's own answer, not a replay
}

// sutError is a 5xx an instance made itself: a problem of its own
// (Idempotency-Problem), or a 502/503/504 (the upstream answers only 500).
type sutError struct {
	key string
	a   answer
}

// observe keeps what the report needs of answer a for key: the reference
// answer, a replay that differs from it, an instance's own 5xx.
func (h *harness) observe(key string, a answer) {
	if a.err != nil {
		return
	}
	s := &h.seen
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.status >= 500 && (a.problem != "" || a.status != http.StatusInternalServerError) {
		s.sutErrors = append(s.sutErrors, sutError{key: key, a: a})
	}
	if !a.done() {
		return
	}
	ref, ok := s.ref[key]
	switch {
	case !ok:
		s.ref[key], s.refOwn[key] = a, !a.replayed
		return
	case !s.refOwn[key] && !a.replayed:
		// The first execution's own answer, after a concurrent duplicate's
		// replay of it: it becomes the reference, and the replay is compared.
		s.ref[key], s.refOwn[key] = a, true
		a, ref = ref, a
	}
	if !same(ref, a) {
		s.fidelity = append(s.fidelity, fidelity{key: key, ref: ref, replay: a, refOwn: s.refOwn[key]})
	}
}

// storeFaults are the faults that make a store fail or answer late.
var storeFaults = []string{"redis-lost-replies", "redis-latency", "redis-resets", "redis-half-open", "redis-down", "postgres-down", "failover"}

// activeFaults names the faults of the log whose window (from 1 s before to a
// lease after their end: a SIGKILLed instance's claims lapse then, a store
// back up answers again) holds t; of kinds only, when kinds is not nil.
func (h *harness) activeFaults(t time.Time, kinds []string) []string {
	h.faults.mu.Lock()
	defer h.faults.mu.Unlock()
	var out []string
	for _, f := range h.faults.faults {
		if kinds != nil && !slices.Contains(kinds, f.kind) {
			continue
		}
		if !t.Before(f.from.Add(-time.Second)) && !t.After(f.to.Add(h.lease+time.Second)) {
			name := f.kind
			if f.target != "" {
				name += " " + f.target
			}
			out = append(out, fmt.Sprintf("%s (%s…%s)", name, f.from.Format("15:04:05.000"), f.to.Format("15:04:05.000")))
		}
	}
	return out
}

// describe is one answer for the report.
func describe(a answer) string {
	return fmt.Sprintf("%d replayed=%v execution %d from %s, sent %s, answered %s, body %d bytes sha256:%s, headers {%s}",
		a.status, a.replayed, a.id, a.instance, a.sent.Format("15:04:05.000"), a.at.Format("15:04:05.000"), a.bodyLen, a.digest, strings.Join(headerLines(a.header), "; "))
}

// faultsOr names faults, or says there were none.
func faultsOr(f []string) string {
	if len(f) == 0 {
		return "none"
	}
	return strings.Join(f, ", ")
}

// Kinds of replays that differ from their key's reference answer.
const (
	// fidelityAnother: the key ran twice; counted, and failed or explained,
	// with the double runs.
	fidelityAnother = "another execution"
	// fidelityReconciledDate: a reconcile's stored answer keeps the lookup's
	// status, Content-Type and body (docs/reconcile.md), no Date: each replay
	// carries the Date of its own moment.
	fidelityReconciledDate = "a reconciled answer's Date"
	fidelityUnexplained    = "unexplained"
)

// fidelityKind says what made replay b differ from reference a.
func fidelityKind(a, b answer) string {
	if a.id != b.id {
		return fidelityAnother
	}
	if a.status != b.status || a.digest != b.digest {
		return fidelityUnexplained
	}
	only := func(name string, ok func(x, y http.Header) bool) bool {
		x, y := a.header.Clone(), b.header.Clone()
		if !ok(x, y) {
			return false
		}
		x.Del(name)
		y.Del(name)
		return slices.Equal(headerLines(x), headerLines(y))
	}
	reconciled := a.status == http.StatusOK && a.replayed && b.replayed
	if reconciled && only("Date", func(x, y http.Header) bool { return true }) {
		return fidelityReconciledDate
	}
	return fidelityUnexplained
}

// headerDiff names the headers a and b differ in.
func headerDiff(a, b http.Header) string {
	var out []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, h := range []http.Header{a, b} {
			for k := range h {
				if !seen[k] && !slices.Contains(perAnswer, k) {
					seen[k] = true
					if !yield(k) {
						return
					}
				}
			}
		}
	}) {
		if !slices.Equal(a.Values(name), b.Values(name)) {
			out = append(out, fmt.Sprintf("%s %q → %q", name, a.Values(name), b.Values(name)))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// fidelityReport classifies each replay that differed from its key's
// reference, fails the unexplained ones, and returns the report's lines (each
// kind's first three in full) and the count of each kind (h.up.mu and
// h.seen.mu are held).
func (h *harness) fidelityReport(failKey func(k, format string, args ...any)) (lines []string, kinds map[string]int) {
	kinds = map[string]int{}
	for _, f := range h.seen.fidelity {
		kind := fidelityKind(f.ref, f.replay)
		kinds[kind]++
		if kind == fidelityUnexplained {
			failKey(f.key, "a replay differs from the first answer: %s, then %s", describe(f.ref), describe(f.replay))
		}
		if kinds[kind] > 3 && kind != fidelityUnexplained {
			continue
		}
		refWhat := "the first execution's own answer"
		if !f.refOwn {
			refWhat = "the first replay (no client got the first execution's own answer)"
		}
		lines = append(lines,
			fmt.Sprintf("replay not byte-identical (%s): %s in phase %s; differs in: status %d → %d, body sha256:%s → sha256:%s, headers: %s",
				kind, f.key, h.name, f.ref.status, f.replay.status, f.ref.digest, f.replay.digest, headerDiff(f.ref.header, f.replay.header)),
			fmt.Sprintf("    reference, %s: %s", refWhat, describe(f.ref)),
			fmt.Sprintf("    differing answer: %s", describe(f.replay)),
			fmt.Sprintf("    faults at the reference: %s; at the differing answer: %s", faultsOr(h.activeFaults(f.ref.at, nil)), faultsOr(h.activeFaults(f.replay.at, nil))))
	}
	return lines, kinds
}

// sutErrorReport names each 5xx an instance made itself, with the faults
// active when it was made (for an outcome-unknown answer: when its key was
// first answered held, the moment the outcome became unknown), and returns
// the report's lines and how many came without a fault (h.seen.mu is held).
func (h *harness) sutErrorReport() (lines []string, withFault, without int) {
	for _, e := range h.seen.sutErrors {
		t := e.a.at
		if hk := h.seen.held[e.key]; e.a.unknown && hk != nil {
			t = hk.first
		}
		// A store's 503 is explained by a store fault alone; an upstream fault or
		// a SIGKILLed instance explains no store failure.
		var kinds []string
		if e.a.problem == "urn:idemproxy:problem:store-unavailable" {
			kinds = storeFaults
		}
		faults := h.activeFaults(t, kinds)
		if len(faults) > 0 {
			withFault++
			continue
		}
		without++
		lines = append(lines,
			fmt.Sprintf("instance 5xx without a fault: %s in phase %s: %d %s from %s, sent %s, answered %s (key first sent %s): %q",
				e.key, h.name, e.a.status, orNone(e.a.problem), e.a.instance, e.a.sent.Format("15:04:05.000"), e.a.at.Format("15:04:05.000"), h.seen.sent[e.key].Format("15:04:05.000"), e.a.detail))
	}
	return lines, withFault, without
}

func orNone(s string) string {
	if s == "" {
		return "(no problem type)"
	}
	return s
}
