package proxy

// The admin API's keys by hash: the key_hash the logs print (the store key's
// first 12 hex digits) or more of its digits names a record without the
// client's credential; and the list of held unknown outcomes.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// minHashDigits is the fewest digits a lookup by hash takes: as many as the
// logs print. Fewer would let a caller of the admin API walk the store's
// records by their leading digits; 12 name only a record someone has seen
// in the logs, in a listing, or in an admin answer.
const minHashDigits = 12

// hashLookupTimeout bounds a lookup by hash: on Redis and DynamoDB it reads
// through the whole store (see each store's List).
const hashLookupTimeout = time.Minute

// HeldKey is one held unknown outcome in the answer of GET /keys?state=held.
type HeldKey struct {
	KeyHash string `json:"key_hash"` // as the logs print it
	Hash    string `json:"hash"`     // the whole store key: accepted by ?hash= as the key_hash is
	// Kind says how the outcome became unknown: "lease_lapsed" (the instance
	// running it stopped, or could not write to the store, before storing an
	// answer) or "no_answer" (sent upstream, and no complete answer came
	// back: a reset, a timeout, a cut body).
	Kind   string `json:"kind"`
	Status int    `json:"status"` // what its retries are answered: 502, or 504 on a timeout
	// Route is the configured path of the route that reconciles the key
	// (known from its reconcile job), else empty.
	Route     string    `json:"route,omitempty"`
	CreatedAt time.Time `json:"created_at"` // when the first request claimed the key
	// HeldSince is when the hold began: HeldUntil less the route's
	// unknown_hold (the lease's end, for a lapsed lease).
	HeldSince time.Time     `json:"held_since"`
	HeldUntil time.Time     `json:"held_until"` // when the key is free again, unless settled before
	Reconcile *KeyReconcile `json:"reconcile,omitempty"`
}

// HeldPage is the answer of GET /keys?state=held.
type HeldPage struct {
	Held []HeldKey `json:"held"`
	// NextCursor asks for the next page (?cursor=); absent after the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// hashMatch is one record whose hash begins with the digits given, in an
// ambiguous answer.
type hashMatch struct {
	Hash      string    `json:"hash"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
}

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
	digits = strings.ToLower(digits)
	if len(digits) < minHashDigits || len(digits) > 64 || strings.Trim(digits, "0123456789abcdef") != "" {
		return nil, http.StatusBadRequest, adminError{Error: fmt.Sprintf("hash: want %d to 64 hex digits of a key's hash (the key_hash the logs print, or the hash a listing shows), got %q", minHashDigits, digits)}
	}
	lister, ok := st.cache.(cache.Lister)
	if !ok {
		return nil, http.StatusNotImplemented, adminError{Error: fmt.Sprintf("this store (%T) cannot find a key by its hash: give the key with the client's --host and --header", st.cache)}
	}
	ctx, cancel := context.WithTimeout(ctx, hashLookupTimeout)
	defer cancel()
	found := map[string]*cache.Record{}
	q := cache.ListQuery{Prefix: digits, Limit: 2}
	for {
		page, err := lister.List(ctx, q)
		if err != nil {
			return nil, http.StatusServiceUnavailable, adminError{Error: err.Error(), KeyHash: digits}
		}
		for _, r := range page.Records {
			found[r.Key] = r.Record
		}
		if q.Cursor = page.Cursor; q.Cursor == "" || len(found) > 1 {
			break
		}
	}
	switch len(found) {
	case 0:
		return nil, http.StatusNotFound, adminError{Error: "not found: no live record's hash begins with these digits (settled, expired, or never stored)", KeyHash: digits}
	case 1:
	default:
		out := struct {
			Error   string      `json:"error"`
			Matches []hashMatch `json:"matches"`
		}{Error: fmt.Sprintf("ambiguous: more than one record's hash begins with %s; give more digits (the whole hash below), or the key with the client's --host and --header", digits)}
		for k, rec := range found {
			out.Matches = append(out.Matches, hashMatch{Hash: k, State: stateOf(rec), CreatedAt: rec.CreatedAt.UTC()})
		}
		return nil, http.StatusConflict, out
	}
	var storeKey string
	for k := range found {
		storeKey = k
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
	q := r.URL.Query()
	if s := q.Get("state"); s != "held" {
		writeJSON(w, http.StatusBadRequest, adminError{Error: fmt.Sprintf("state: only held is listed, got %q", s)})
		return
	}
	limit := cache.DefaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > cache.MaxListLimit {
			writeJSON(w, http.StatusBadRequest, adminError{Error: fmt.Sprintf("limit: want 1 to %d, got %q", cache.MaxListLimit, s)})
			return
		}
		limit = n
	}
	st := p.acquire()
	defer st.release()
	lister, ok := st.cache.(cache.Lister)
	if !ok {
		writeJSON(w, http.StatusNotImplemented, adminError{Error: fmt.Sprintf("this store (%T) cannot list its held keys", st.cache)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), hashLookupTimeout)
	defer cancel()
	page, err := lister.List(ctx, cache.ListQuery{Held: true, Cursor: q.Get("cursor"), Limit: limit})
	switch {
	case errors.Is(err, cache.ErrBadCursor):
		writeJSON(w, http.StatusBadRequest, adminError{Error: "cursor: not one this listing gave (start again without it)"})
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, adminError{Error: err.Error()})
		return
	}
	jobs, _ := st.cache.(cache.Reconciler)
	out := HeldPage{Held: make([]HeldKey, 0, len(page.Records)), NextCursor: page.Cursor}
	for _, l := range page.Records {
		rec := l.Record
		hk := HeldKey{KeyHash: l.Key[:min(len(l.Key), 12)], Hash: l.Key, Kind: "no_answer", Status: rec.Response.Status,
			CreatedAt: rec.CreatedAt.UTC(), HeldUntil: rec.ExpiresAt.UTC()}
		if rec.Lapsed {
			hk.Kind = "lease_lapsed"
		}
		rt := st.def
		if jobs != nil {
			if job, err := jobs.GetReconcile(ctx, l.Key); err == nil {
				hk.Route, hk.Reconcile = job.Route, keyReconcile(job)
				rt = st.routeNamed(job.Route)
			}
		}
		hk.HeldSince = hk.HeldUntil.Add(-rt.h.Settings().UnknownHold)
		out.Held = append(out.Held, hk)
	}
	writeJSON(w, http.StatusOK, out)
}

// stateOf names a record's state as the admin API shows it.
func stateOf(rec *cache.Record) string {
	if cache.IsHeld(rec) {
		return "held"
	}
	return rec.State.String()
}
