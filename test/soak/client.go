package main

// The soak's clients: each sends keyed requests and their retries, and tallies
// what came back.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

type answer struct {
	status   int
	replayed bool
	// unknown: the outcome-unknown problem (502 or 504): the key is held, and
	// nothing runs again with it unless reconcile (or an operator) settles it.
	unknown bool
	// lapsed: held because the claim of its first execution lapsed (its instance
	// was SIGKILLed, or its store writes stopped for a whole lock_ttl).
	lapsed bool
	id     int64
	err    error
	// What the soak reports of an answer that breaks a promise (fidelity.go):
	// the instance that answered, when, its end-to-end headers and body digest,
	// and the problem type of an answer the instance made itself.
	instance string
	sent, at time.Time // when the request was sent, and when its answer had come
	header   http.Header
	digest   string
	bodyLen  int
	problem  string
	detail   string
}

// done reports whether the answer completes the operation: the upstream's 201,
// first or replayed, or the 200 a reconcile stored for a held key, replayed.
func (a answer) done() bool {
	return a.err == nil && a.id != 0 && (a.status == http.StatusCreated || a.status == http.StatusOK && a.replayed)
}

func (h *harness) send(ctx context.Context, key, body string) answer {
	p := h.proxies[rand.IntN(len(h.proxies))]
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+p.addr+"/ops", strings.NewReader(body))
	// One Host for all instances, as behind a load balancer (the Host scopes keys).
	req.Host = "api.example"
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer soak")
	req.Header.Set("Content-Type", "application/json")
	h.st.requests.Add(1)
	sent := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return answer{err: err, instance: p.name, sent: sent, at: time.Now()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		// A body cut short is no answer: its digest would not be the response's.
		return answer{err: fmt.Errorf("reading the body: %w", err), instance: p.name, sent: sent, at: time.Now()}
	}
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		unknown: bytes.Contains(b, []byte("outcome-unknown")), instance: p.name, sent: sent, at: time.Now(),
		header: resp.Header, digest: digest(b), bodyLen: len(b), problem: resp.Header.Get("Idempotency-Problem")}
	if a.problem != "" {
		var pb struct {
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(b, &pb)
		a.detail = pb.Detail
	}
	a.lapsed = a.unknown && bytes.Contains(b, []byte("stopped before its outcome was stored"))
	if a.status == http.StatusCreated || a.status == http.StatusOK && a.replayed && h.reconcile {
		// 201: the upstream's answer. 200, replayed: a reconcile's lookup answer
		// stored for a held key; both carry the execution id.
		var v struct {
			Execution int64 `json:"execution"`
		}
		if json.Unmarshal(b, &v) != nil || v.Execution == 0 {
			h.st.unexpected.Add(1)
		}
		a.id = v.Execution
	}
	if a.unknown {
		if a.status != http.StatusBadGateway && a.status != http.StatusGatewayTimeout || a.lapsed && a.status != http.StatusGatewayTimeout {
			h.st.unexpected.Add(1)
		}
		h.seen.hold(key, a.lapsed)
	}
	h.observe(key, a)
	return a
}

// complete retries key until it completes (or the run is far past its end),
// or until it is answered held: that answer is final for the client, and a
// follow-up in the background asks again a few times (in a reconcile round,
// until reconcile settles it).
func (h *harness) complete(key, body string) (int64, bool) {
	giveUp := h.deadline.Add(60 * time.Second)
	for time.Now().Before(giveUp) {
		a := h.send(context.Background(), key, body)
		if h.tally(a) {
			h.seen.record(key, a.id)
			return a.id, true
		}
		if a.unknown {
			h.followers.Add(1)
			go func() { defer h.followers.Done(); h.follow(key, body) }()
			return 0, false
		}
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
	}
	return 0, false
}

// follow asks again about a key answered held: each answer is counted, and a
// completion (a reconcile's resolution, or a run after its release) recorded.
// Without a reconcile route, twice, a second apart; with one, each second for
// up to 12 s, which covers the round's claim, upstream_timeout and the
// reconcile's confirmation.
func (h *harness) follow(key, body string) {
	tries, every := 2, time.Second
	if h.reconcile {
		tries = 12
	}
	for i := 0; i < tries; i++ {
		time.Sleep(every)
		a := h.send(context.Background(), key, body)
		if h.tally(a) {
			h.seen.record(key, a.id)
			return
		}
	}
}

// tally counts an answer and reports whether it completed the operation.
func (h *harness) tally(a answer) bool {
	switch {
	case a.err != nil:
		h.st.connErrors.Add(1)
	case a.done():
		if a.status == http.StatusOK {
			h.st.resolvedReplays.Add(1)
		} else if a.replayed {
			h.st.replays.Add(1)
		}
		return true
	case a.status == http.StatusConflict:
		h.st.conflicts.Add(1)
	case a.status == http.StatusServiceUnavailable:
		h.st.unavailable.Add(1)
	case a.unknown:
		h.st.unknownAnswers.Add(1)
	case a.status == http.StatusBadGateway || a.status == http.StatusGatewayTimeout:
		h.st.badGateway.Add(1)
	case a.status == http.StatusInternalServerError:
		h.st.upstream5xx.Add(1)
	default:
		h.st.unexpected.Add(1)
	}
	return false
}

func (h *harness) clientLoop(c int) {
	for n := 0; time.Now().Before(h.deadline); n++ {
		key := fmt.Sprintf("soak-%d-%d", c, n)
		body := fmt.Sprintf(`{"client":%d,"op":%d,"amount":%d}`, c, n, rand.IntN(10000))
		h.seen.mu.Lock()
		h.seen.body[key], h.seen.sent[key] = body, time.Now()
		h.seen.mu.Unlock()
		switch r := rand.IntN(10); {
		case r == 0: // concurrent duplicates on different instances
			var wg sync.WaitGroup
			for i := 0; i < 3; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if a := h.send(context.Background(), key, body); h.tally(a) {
						h.seen.record(key, a.id)
					}
				}()
			}
			wg.Wait()
		case r == 1: // the client hangs up mid-request, then retries
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2+rand.IntN(30))*time.Millisecond)
			if a := h.send(ctx, key, body); a.err != nil {
				h.st.hangups.Add(1)
			} else if h.tally(a) {
				h.seen.record(key, a.id)
			}
			cancel()
		}
		if _, ok := h.complete(key, body); !ok {
			continue
		}
		switch r := rand.IntN(10); {
		case r < 3: // a retry of a completed operation: must be the same answer
			if a := h.send(context.Background(), key, body); h.tally(a) {
				h.seen.record(key, a.id)
			}
		case r == 3: // the key reused for another payload: must never run
			a := h.send(context.Background(), key, body+" ")
			switch {
			case a.err == nil && a.status == http.StatusUnprocessableEntity:
				h.st.mismatches.Add(1)
			case a.err == nil && a.status < 300:
				h.st.mismatchViolations.Add(1)
			default:
				h.tally(a)
			}
		}
	}
}
