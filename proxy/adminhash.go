package proxy

// The admin API's keys by hash: the key_hash the logs print (the store key's
// first 12 hex digits) or more of its digits names a record without the
// client's credential; and the list of held unknown outcomes.

import (
	"context"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/adminkeys"
)

// adminByHash serves GET and DELETE /keys, POST /release and POST /resolve
// with ?hash=, and GET /keys?state=held.
func (p *Proxy) adminByHash(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.Method == http.MethodGet && q.Get("state") != "" {
		p.adminHeld(w, r)
		return
	}
	if !q.Has("hash") {
		what := "?hash=KEY_HASH (the key_hash the logs print)"
		if r.Method == http.MethodGet {
			what += ", or ?state=held"
		}
		writeJSON(w, http.StatusBadRequest, adminError{Error: "give the key in the path (/keys/KEY with the client's --host and --header) or " + what})
		return
	}
	st := p.acquire()
	defer st.release()
	l, status, body := p.lookupHash(r.Context(), st, q.Get("hash"), q.Get("path"))
	if l == nil {
		writeJSON(w, status, body)
		return
	}
	switch r.Method {
	case http.MethodPost:
		p.settle(w, r, st, l)
	default:
		p.keyRecordOp(w, r, st, l)
	}
}

// lookupHash finds the one live record whose store key begins with digits.
// The route whose settings apply is the one its reconcile job names, else
// the one path matches, else the top level. On failure it returns the status
// and body to answer.
func (p *Proxy) lookupHash(ctx context.Context, st *state, digits, path string) (*keyLookup, int, any) {
	storeKey, status, body := adminkeys.FindHash(ctx, st.cache, digits)
	if storeKey == "" {
		return nil, status, body
	}
	rt := st.def
	if path != "" {
		rt = st.routeForPath(path)
	}
	if jobs, ok := st.cache.(cache.Reconciler); ok {
		if job, err := jobs.GetReconcile(ctx, storeKey); err == nil {
			rt = st.routeNamed(job.Route)
		}
	}
	l := &keyLookup{rt: rt, storeKey: storeKey, keyHash: storeKey[:min(len(storeKey), 12)]}
	l.notFound = adminError{Error: "not found: settled or expired since it was looked up", KeyHash: l.keyHash}
	return l, 0, nil
}

// routeNamed is the route configured with path, else the top level.
func (st *state) routeNamed(path string) *route {
	for _, rt := range st.routes {
		if rt.path == path {
			return rt
		}
	}
	return st.def
}

// adminHeld serves GET /keys?state=held: one page of the held unknown
// outcomes and their reconcile jobs.
func (p *Proxy) adminHeld(w http.ResponseWriter, r *http.Request) {
	st := p.acquire()
	defer st.release()
	adminkeys.Held(w, r, st.cache, func(route string) time.Duration {
		rt := st.def
		if route != "" {
			rt = st.routeNamed(route)
		}
		return rt.h.Settings().UnknownHold
	})
}
