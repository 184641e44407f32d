package proxy

// The access log (access_log): a request line for the requests the core does
// not track, in the shape of the core's own (observe).

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/internal/status"
	"github.com/idemproxy/idemproxy/prommetrics"
)

// passUntracked forwards a request the core does not track, counted under
// counts, and logs its line when access_log is on.
func (p *Proxy) passUntracked(st *state, counts *prommetrics.RouteRequests, w http.ResponseWriter, r *http.Request, next http.Handler) {
	counts.Untracked()
	if !st.cfg.AccessLog || !p.log.Enabled(r.Context(), slog.LevelInfo) {
		next.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	sw := &status.Writer{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	p.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("outcome", prommetrics.Untracked),
		slog.Int("status", sw.Final()),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
}
