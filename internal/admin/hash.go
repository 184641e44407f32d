package admin

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

// byHash serves GET and DELETE /keys, POST /release and POST /resolve with
// ?hash=, and GET /keys?state=held.
func (a *api) byHash(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.Method == http.MethodGet && q.Get("state") != "" {
		a.held(w, r)
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
	v := a.view(w, r)
	if v == nil {
		return
	}
	defer v.Release()
	l, status, body := lookupHash(r.Context(), v, q.Get("hash"), q.Get("path"))
	if l == nil {
		writeJSON(w, status, body)
		return
	}
	switch r.Method {
	case http.MethodPost:
		a.settle(w, r, v, l)
	default:
		a.recordOp(w, r, v, l)
	}
}

// lookupHash finds the one live record whose store key begins with digits.
// The route whose settings apply is the one its reconcile job names, else
// the one path matches, else the top level. On failure it returns the status
// and body to answer.
func lookupHash(ctx context.Context, v View, digits, path string) (*keyLookup, int, any) {
	store := v.Store()
	storeKey, status, body := adminkeys.FindHash(ctx, store, digits)
	if storeKey == "" {
		return nil, status, body
	}
	rt := v.Default()
	if path != "" {
		rt = routeForPath(v, path)
	}
	if jobs, ok := store.(cache.Reconciler); ok {
		if job, err := jobs.GetReconcile(ctx, storeKey); err == nil {
			rt = v.Named(job.Route)
		}
	}
	l := &keyLookup{rt: rt, storeKey: storeKey, keyHash: storeKey[:min(len(storeKey), 12)]}
	l.notFound = adminError{Error: "not found: settled or expired since it was looked up", KeyHash: l.keyHash}
	return l, 0, nil
}

// held serves GET /keys?state=held: one page of the held unknown outcomes
// and their reconcile jobs.
func (a *api) held(w http.ResponseWriter, r *http.Request) {
	v := a.view(w, r)
	if v == nil {
		return
	}
	defer v.Release()
	adminkeys.Held(w, r, v.Store(), func(route string) time.Duration {
		rt := v.Default()
		if route != "" {
			rt = v.Named(route)
		}
		return rt.Core.Settings().UnknownHold
	})
}
