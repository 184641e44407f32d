package middlewaretest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// SetReadDeadline is a connection's, as net/http's writer has it (the core
// sets the body's read deadline through http.ResponseController).
func (d *discard) SetReadDeadline(time.Time) error { return nil }

// Bench runs the core's first execution and replay against store, in parallel
// (each includes the store's round trips: 2 and 1), as sub-benchmarks
// FirstExecution and Replay.
func Bench(b *testing.B, store cache.Store) {
	h, err := middleware.New(store)
	if err != nil {
		b.Fatal(err)
	}
	wrapped := h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}))
	send := func(key string) {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", key)
		wrapped.ServeHTTP(&discard{h: http.Header{}}, r)
	}
	for i := 0; i < 64; i++ {
		send("replay-" + strconv.Itoa(i))
	}
	var n atomic.Int64
	for _, bc := range []struct {
		name string
		key  func(i int64) string
	}{
		{"FirstExecution", func(i int64) string { return "first-" + strconv.FormatInt(i, 10) }},
		{"Replay", func(i int64) string { return "replay-" + strconv.FormatInt(i%64, 10) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					send(bc.key(n.Add(1)))
				}
			})
		})
	}
}
