package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/webhook"
)

// The core's hot paths with the memory store. The Redis and PostgreSQL variants
// (middlewaretest.Bench) are in cache/redisstore and cache/pgstore (they need a
// server).

var benchBody = strings.Repeat(`{"amount":100,"currency":"EUR"}`, 4)

func benchHandler(b *testing.B, store cache.Store) http.Handler {
	h, err := middleware.New(store)
	if err != nil {
		b.Fatal(err)
	}
	return h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"ch_1","status":"succeeded"}`))
	}))
}

// discard is a ResponseWriter that keeps nothing, so the benchmark measures the core.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// SetReadDeadline is a connection's, as net/http's writer has it (the core
// sets the body's read deadline through http.ResponseController).
func (d *discard) SetReadDeadline(time.Time) error { return nil }

func run(b *testing.B, h http.Handler, key func(i int) string, body string) {
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		for pb.Next() {
			i := int(n.Add(1))
			r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
			r.Header.Set("Idempotency-Key", key(i))
			r.Header.Set("Authorization", "Bearer sk_test_123")
			clear(w.h)
			h.ServeHTTP(w, r)
		}
	})
}

// BenchmarkCore runs the four outcomes with the memory store.
func BenchmarkCore(b *testing.B) {
	for _, bc := range []struct {
		name string
		key  func(i int) string
		body string
		prep func(h http.Handler)
	}{
		{"FirstExecution", func(i int) string { return "k" + strconv.Itoa(i) }, benchBody, nil},
		{"Replay", func(i int) string { return "k" + strconv.Itoa(i%64) }, benchBody, prepare},
		{"Mismatch", func(i int) string { return "k" + strconv.Itoa(i%64) }, benchBody + "x", prepare},
		{"Bypass", func(int) string { return "" }, benchBody, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHandler(b, newMem(b))
			if bc.prep != nil {
				bc.prep(h)
			}
			run(b, h, bc.key, bc.body)
		})
	}
}

func prepare(h http.Handler) {
	for i := 0; i < 64; i++ {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(benchBody))
		r.Header.Set("Idempotency-Key", "k"+strconv.Itoa(i))
		r.Header.Set("Authorization", "Bearer sk_test_123")
		h.ServeHTTP(&discard{h: http.Header{}}, r)
	}
}

// BenchmarkConflict: duplicates of a request that stays in flight.
func BenchmarkConflict(b *testing.B) {
	store := newMem(b)
	release := make(chan struct{})
	started := make(chan struct{})
	h, _ := middleware.New(store)
	blocked := h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { close(started); <-release }))
	go func() {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(benchBody))
		r.Header.Set("Idempotency-Key", "held")
		r.Header.Set("Authorization", "Bearer sk_test_123")
		blocked.ServeHTTP(&discard{h: http.Header{}}, r)
	}()
	<-started
	defer close(release)
	run(b, blocked, func(int) string { return "held" }, benchBody)
}

// BenchmarkWebhook: a Stripe delivery of a 2 KiB event through the core,
// signature verified and the key taken from the body's /id, against the same
// request keyed by a header without verification. Replays, and claims that run
// (in_flight_only, so every request claims, runs and releases its key: a first
// execution each time without signing a new body per request).
func BenchmarkWebhook(b *testing.B) {
	event := func(id string) string {
		return `{"id":"` + id + `","object":"event","type":"payment_intent.succeeded","data":{"object":{"metadata":"` +
			strings.Repeat("x", 2000) + `"}}}`
	}
	stripe := webhookOpt(webhook.Webhook{Preset: webhook.Stripe, Secrets: []string{"whsec_bench"}, Tolerance: webhook.DefaultTolerance})
	for _, bc := range []struct {
		name   string
		opts   []middleware.Option
		replay bool
	}{
		{"HeaderKey/Run", []middleware.Option{func(s *middleware.Settings) { s.InFlightOnly = true }}, false},
		{"HeaderKey/Replay", nil, true},
		{"Stripe/Run", []middleware.Option{func(s *middleware.Settings) { s.InFlightOnly = true }, stripe}, false},
		{"Stripe/Replay", []middleware.Option{stripe}, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, err := middleware.New(newMem(b), bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			wrapped := h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
			// Signed once per id up front: the benchmark measures verifying, not signing.
			const ids = 4096
			bodies, sigs := make([]string, ids), make([]string, ids)
			for i := range ids {
				bodies[i] = event("evt_" + strconv.Itoa(i))
				hd, _ := webhook.Webhook{Preset: webhook.Stripe, Secrets: []string{"whsec_bench"}}.Sign("", time.Now(), []byte(bodies[i]))
				sigs[i] = hd.Get("Stripe-Signature")
			}
			send := func(i int, w *discard) {
				r := httptest.NewRequest("POST", "/webhooks", strings.NewReader(bodies[i%ids]))
				r.Header.Set("Stripe-Signature", sigs[i%ids])
				r.Header.Set("Idempotency-Key", "evt_"+strconv.Itoa(i%ids))
				clear(w.h)
				wrapped.ServeHTTP(w, r)
			}
			if bc.replay {
				for i := range ids {
					send(i, &discard{h: http.Header{}})
				}
			}
			b.ReportAllocs()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				w := &discard{h: http.Header{}}
				for pb.Next() {
					send(int(n.Add(1)), w)
				}
			})
		})
	}
}

// BenchmarkReplay: one replay at a time through the core on the memory store,
// against the floor: a plain net/http handler that reads the request body and
// writes a stored response (its status, header map and body, as a replay
// does), with no idempotency at all. Both include httptest.NewRequest.
func BenchmarkReplay(b *testing.B) {
	stored := &cache.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"id":"ch_1","status":"succeeded"}`)}
	plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		for k, v := range stored.Header {
			h[k] = v
		}
		h.Set("Content-Length", strconv.Itoa(len(stored.Body)))
		w.WriteHeader(stored.Status)
		_, _ = w.Write(stored.Body)
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"Plain", plain}, {"Memory", benchHandler(b, newMem(b))}} {
		b.Run(bc.name, func(b *testing.B) {
			prepare(bc.h)
			replayLoop(b, bc.h)
		})
	}
}

// replayLoop sends replays of the 64 keys prepare stored, one at a time.
func replayLoop(b *testing.B, h http.Handler) {
	w := &discard{h: http.Header{}}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(benchBody))
		r.Header.Set("Idempotency-Key", keys[i%64])
		r.Header.Set("Authorization", "Bearer sk_test_123")
		clear(w.h)
		h.ServeHTTP(w, r)
		i++
	}
}
