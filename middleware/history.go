package middleware

import (
	"context"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// RequestInfo is what a packaging knows of a request beyond it, for the
// record's history (Settings.RequestInfo).
type RequestInfo struct {
	ID     string // the request id the packaging logs (X-Request-Id)
	Client string // the client's address
	Route  string // the configured path of the route that tracks it
}

// requestInfo is the encoded cache.Info of a first execution claimed now:
// its method and canonical path (no query, which may carry a key; no header
// value, no body), and what the packaging knows of it.
func (h *Handler) requestInfo(r *http.Request, path string, now time.Time) string {
	var ri RequestInfo
	if h.s.RequestInfo != nil {
		ri = h.s.RequestInfo(r)
	} else {
		ri = RequestInfo{ID: firstValue(r.Header, "X-Request-Id"), Client: r.RemoteAddr}
	}
	return cache.EncodeInfo(&cache.Info{Method: r.Method, Path: path, Route: ri.Route, RequestID: ri.ID,
		Client: ri.Client, FirstSeen: now})
}

// countReplay tells a store that counts replays of one answer from rec.
func (h *Handler) countReplay(storeKey string, rec *cache.Record) {
	if h.replays != nil && !rec.Lapsed {
		h.replays.CountReplay(storeKey, rec.CreatedAt, time.Now()) // answered now: a duplicate may have waited
	}
}

// Settle settles a held unknown outcome under storeKey as Resolve does,
// naming who settles it in the record's history (cache.ByOperator,
// cache.ByReconcile), and returns that history, a released record's last.
func (h *Handler) Settle(ctx context.Context, storeKey string, res *Resolution, by string) (*cache.Info, error) {
	resp, err := h.resolution(res)
	if err != nil {
		return nil, err
	}
	return cache.Settle(ctx, h.store, storeKey, resp, h.s.TTL, by, time.Now())
}
