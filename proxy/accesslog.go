package proxy

// The access log (access_log): a request line for the requests the core does
// not track, in the shape of the core's own (observe).

import (
	"log/slog"
	"net/http"
	"time"

	imetrics "github.com/idemproxy/idemproxy/internal/metrics"
)

// passUntracked forwards a request the core does not track, counted under
// counts, and logs its line when access_log is on.
func (p *Proxy) passUntracked(st *state, counts *imetrics.RouteRequests, w http.ResponseWriter, r *http.Request, next http.Handler) {
	counts.Untracked()
	if !st.cfg.AccessLog || !p.log.Enabled(r.Context(), slog.LevelInfo) {
		next.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	if sw.status == 0 {
		sw.status = http.StatusOK // nothing written: net/http sends 200
	}
	p.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("outcome", imetrics.Untracked),
		slog.Int("status", sw.status),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
}

// statusWriter notes the final status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Flush, Hijack,
// deadlines) as ReverseProxy needs it.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
