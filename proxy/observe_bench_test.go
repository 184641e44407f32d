package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/middleware"
)

// BenchmarkObserve is the metrics side of the observer the core calls once per
// tracked request (logging off: its cost is the logger's, not the metrics').
func BenchmarkObserve(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Upstream = "http://127.0.0.1:1"
	p, err := New(context.Background(), &cfg, slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ev := middleware.Event{
		Outcome:       middleware.OutcomeStored,
		Status:        201,
		Duration:      3 * time.Millisecond,
		StoreDuration: 150 * time.Microsecond,
		Request:       httptest.NewRequest("POST", "http://127.0.0.1/pay", nil),
	}
	counts := p.cur.Load().def.counts
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.observe(counts, ev)
		}
	})
}
