// Package adminkeys is what the admin APIs of idemproxy (internal/admin) and
// of Caddy (caddymodule's admin.api.idempotency) share: the JSON shapes of a
// record, a held key and a settlement, and the operations on a store behind
// them — finding a record by the key hash the logs print, listing the held
// unknown outcomes, reading, purging, releasing and resolving a record. Each
// API finds its store and its core (the route, the handler) its own way and
// hands them here.
package adminkeys

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

// KeyRecord is the JSON shape of a record (GET /keys/{key}). Field order is
// stable.
type KeyRecord struct {
	KeyHash     string       `json:"key_hash"`
	State       string       `json:"state"`
	Fingerprint string       `json:"fingerprint"`
	CreatedAt   time.Time    `json:"created_at"`
	ExpiresAt   time.Time    `json:"expires_at"`
	Response    *KeyResponse `json:"response,omitempty"`
	// Request is the first request, as the record keeps it (absent from a
	// record an earlier version wrote).
	Request *KeyRequest `json:"request,omitempty"`
	// Replays is how many retries were answered from the record, and
	// LastReplay when the latest was (counted in batches by the shared
	// stores: a replay shows here within seconds).
	Replays    int64     `json:"replays"`
	LastReplay time.Time `json:"last_replay,omitzero"`
	// History is what held and settled the record, oldest first.
	History []KeyEvent `json:"history,omitempty"`
	// Reconcile is the key's reconcile job, while it has one (a held
	// unknown outcome of a route that reconciles).
	Reconcile *KeyReconcile `json:"reconcile,omitempty"`
}

// KeyRequest is the first request of a record: no header value and no
// body, only what tells an operator which request it was.
type KeyRequest struct {
	Method    string    `json:"method"`
	Path      string    `json:"path"` // canonical, without the query
	Route     string    `json:"route,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	Client    string    `json:"client,omitempty"`
	FirstSeen time.Time `json:"first_seen"`
}

// KeyEvent is one step of a record's history: held (by no_answer or
// lease_lapsed), resolved or released (by operator, reconcile, or
// late_completion: the first execution's own answer, stored after its
// claim lapsed).
type KeyEvent struct {
	Event string    `json:"event"`
	By    string    `json:"by,omitempty"`
	At    time.Time `json:"at,omitzero"` // absent for a hold by lapse, which began at held_since
}

// Request and History are info as the admin APIs show it.
func Request(info *cache.Info) *KeyRequest {
	if info == nil || info.Method == "" && info.Path == "" {
		return nil
	}
	return &KeyRequest{Method: info.Method, Path: info.Path, Route: info.Route, RequestID: info.RequestID,
		Client: info.Client, FirstSeen: info.FirstSeen.UTC()}
}

// History is info's events as the admin APIs show them.
func History(info *cache.Info) []KeyEvent {
	if info == nil {
		return nil
	}
	out := make([]KeyEvent, 0, len(info.Events))
	for _, ev := range info.Events {
		ke := KeyEvent{Event: string(ev.Kind), By: ev.By}
		if !ev.At.IsZero() {
			ke.At = ev.At.UTC()
		}
		out = append(out, ke)
	}
	return out
}

// KeyReconcile is a held key's reconcile schedule in a KeyRecord.
type KeyReconcile struct {
	State       string    `json:"state"` // scheduled, or exhausted (held for an operator)
	Request     string    `json:"request"`
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt,omitzero"` // when scheduled
	Deadline    time.Time `json:"deadline"`              // no attempt starts after it
	LastStatus  int       `json:"last_status,omitempty"` // the last answer's status
	LastError   string    `json:"last_error,omitempty"`  // why the last attempt got no answer
}

// KeyResponse is the stored response in a KeyRecord.
type KeyResponse struct {
	Status     int                 `json:"status"`
	Headers    map[string][]string `json:"headers"`
	BodySize   int64               `json:"body_size"`
	BodyBase64 string              `json:"body_base64"`
	Oversize   bool                `json:"oversize"`
	// Unknown: a held unknown outcome (the first execution was sent and no
	// complete answer came back); release it to let the next retry run.
	Unknown bool `json:"unknown_outcome"`
}

// ResolveRequest is the JSON body of POST /resolve: the response every retry
// of the held request is answered with. Body is text; BodyBase64, when set,
// is the body as base64 instead.
type ResolveRequest struct {
	Status     int                 `json:"status"`
	Headers    map[string][]string `json:"headers"`
	Body       string              `json:"body"`
	BodyBase64 string              `json:"body_base64"`
}

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
	// Request is the first request, History what held it (see KeyRecord).
	Request *KeyRequest `json:"request,omitempty"`
	Replays int64       `json:"replays"`
	History []KeyEvent  `json:"history,omitempty"`
	// HeldSince is when the hold began: HeldUntil less the route's
	// unknown_hold (the claim's end, for a lapsed claim).
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

// Error is an admin API's error answer.
type Error struct {
	Error   string `json:"error"`
	KeyHash string `json:"key_hash,omitempty"`
	// Scope is what the key was looked up under, on a miss: a key is scoped
	// by the Host and the scope headers the client sent.
	Scope any `json:"scope,omitempty"`
}

// HashMatch is one record whose hash begins with the digits given, in an
// ambiguous answer.
type HashMatch struct {
	Hash      string    `json:"hash"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
}

// MinHashDigits is the fewest digits a lookup by hash takes: as many as the
// logs print. Fewer would let a caller of the admin API walk the store's
// records by their leading digits; 12 name only a record someone has seen
// in the logs, in a listing, or in an admin answer.
const MinHashDigits = 12

// ListTimeout bounds a lookup by hash and a listing: on Redis and DynamoDB
// they read through the whole store (see each store's List).
const ListTimeout = time.Minute

// OpTimeout bounds reading, purging and settling one record.
const OpTimeout = 5 * time.Second

// WriteJSON answers v as indented JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Record is rec as KeyRecord.
func Record(keyHash string, rec *cache.Record) KeyRecord {
	out := KeyRecord{
		KeyHash:     keyHash,
		State:       rec.State.String(),
		Fingerprint: hex.EncodeToString([]byte(rec.Fingerprint)),
		CreatedAt:   rec.CreatedAt.UTC(),
		ExpiresAt:   rec.ExpiresAt.UTC(),
	}
	if resp := rec.Response; resp != nil {
		headers := map[string][]string(resp.Header)
		if headers == nil {
			headers = map[string][]string{}
		}
		out.Response = &KeyResponse{Status: resp.Status, Headers: headers, BodySize: resp.BodySize,
			BodyBase64: base64.StdEncoding.EncodeToString(resp.Body), Oversize: resp.Oversize, Unknown: resp.Unknown}
	}
	if !rec.LastReplay.IsZero() {
		out.Replays, out.LastReplay = rec.Replays, rec.LastReplay.UTC()
	}
	if info, err := cache.InfoOf(rec); err == nil { // one that does not decode is left out
		out.Request, out.History = Request(info), History(info)
	}
	return out
}

// Reconcile shows a reconcile job; the path is shown without its query,
// which may carry the key.
func Reconcile(job *cache.Job) *KeyReconcile {
	path, _, _ := strings.Cut(job.URL, "?")
	out := &KeyReconcile{State: job.State.String(), Request: job.Method + " " + path, Attempts: job.Attempts,
		Deadline: job.Deadline.UTC(), LastStatus: job.LastStatus, LastError: job.LastError}
	if job.State == cache.JobScheduled {
		out.NextAttempt = job.Due.UTC()
	}
	return out
}

// StateOf names a record's state as the admin API shows it.
func StateOf(rec *cache.Record) string {
	if cache.IsHeld(rec) {
		return "held"
	}
	return rec.State.String()
}

// FindHash finds the one live record of store whose store key begins with
// digits. On failure it returns "" with the status and body to answer.
func FindHash(ctx context.Context, store cache.Store, digits string) (storeKey string, status int, body any) {
	digits = strings.ToLower(digits)
	if len(digits) < MinHashDigits || len(digits) > 64 || strings.Trim(digits, "0123456789abcdef") != "" {
		return "", http.StatusBadRequest, Error{Error: fmt.Sprintf("hash: want %d to 64 hex digits of a key's hash (the key_hash the logs print, or the hash a listing shows), got %q", MinHashDigits, digits)}
	}
	lister, ok := store.(cache.Lister)
	if !ok {
		return "", http.StatusNotImplemented, Error{Error: fmt.Sprintf("this store (%T) cannot find a key by its hash: give the key with the client's --host and --header", store)}
	}
	ctx, cancel := context.WithTimeout(ctx, ListTimeout)
	defer cancel()
	found := map[string]*cache.Record{}
	q := cache.ListQuery{Prefix: digits, Limit: 2}
	for {
		page, err := lister.List(ctx, q)
		if err != nil {
			return "", http.StatusServiceUnavailable, Error{Error: err.Error(), KeyHash: digits}
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
		return "", http.StatusNotFound, Error{Error: "not found: no live record's hash begins with these digits (settled, expired, or never stored)", KeyHash: digits}
	case 1:
		for k := range found {
			storeKey = k
		}
		return storeKey, 0, nil
	}
	out := struct {
		Error   string      `json:"error"`
		Matches []HashMatch `json:"matches"`
	}{Error: fmt.Sprintf("ambiguous: more than one record's hash begins with %s; give more digits (the whole hash below), or the key with the client's --host and --header", digits)}
	for k, rec := range found {
		out.Matches = append(out.Matches, HashMatch{Hash: k, State: StateOf(rec), CreatedAt: rec.CreatedAt.UTC()})
	}
	return "", http.StatusConflict, out
}

// Held answers GET /keys?state=held (?limit=, ?cursor=) from store: one page
// of its held unknown outcomes and their reconcile jobs. hold is the
// unknown_hold of the route a job names ("" when none does).
func Held(w http.ResponseWriter, r *http.Request, store cache.Store, hold func(route string) time.Duration) {
	q := r.URL.Query()
	if s := q.Get("state"); s != "held" {
		WriteJSON(w, http.StatusBadRequest, Error{Error: fmt.Sprintf("state: only held is listed, got %q", s)})
		return
	}
	limit := cache.DefaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > cache.MaxListLimit {
			WriteJSON(w, http.StatusBadRequest, Error{Error: fmt.Sprintf("limit: want 1 to %d, got %q", cache.MaxListLimit, s)})
			return
		}
		limit = n
	}
	lister, ok := store.(cache.Lister)
	if !ok {
		WriteJSON(w, http.StatusNotImplemented, Error{Error: fmt.Sprintf("this store (%T) cannot list its held keys", store)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ListTimeout)
	defer cancel()
	page, err := lister.List(ctx, cache.ListQuery{Held: true, Cursor: q.Get("cursor"), Limit: limit})
	switch {
	case errors.Is(err, cache.ErrBadCursor):
		WriteJSON(w, http.StatusBadRequest, Error{Error: "cursor: not one this listing gave (start again without it)"})
		return
	case err != nil:
		WriteJSON(w, http.StatusServiceUnavailable, Error{Error: err.Error()})
		return
	}
	jobs, _ := store.(cache.Reconciler)
	out := HeldPage{Held: make([]HeldKey, 0, len(page.Records)), NextCursor: page.Cursor}
	for _, l := range page.Records {
		rec := l.Record
		hk := HeldKey{KeyHash: l.Key[:min(len(l.Key), 12)], Hash: l.Key, Kind: "no_answer", Status: rec.Response.Status,
			CreatedAt: rec.CreatedAt.UTC(), HeldUntil: rec.ExpiresAt.UTC()}
		if rec.Lapsed {
			hk.Kind = "lease_lapsed"
		}
		hk.Replays = rec.Replays
		if info, err := cache.InfoOf(rec); err == nil {
			hk.Request, hk.History = Request(info), History(info)
		}
		route := ""
		if jobs != nil {
			if job, err := jobs.GetReconcile(ctx, l.Key); err == nil {
				hk.Route, hk.Reconcile = job.Route, Reconcile(job)
				route = job.Route
			}
		}
		hk.HeldSince = hk.HeldUntil.Add(-hold(route))
		out.Held = append(out.Held, hk)
	}
	WriteJSON(w, http.StatusOK, out)
}

// ReadResolve reads the body of POST /resolve (a ResolveRequest) into the
// resolution it asks for. On failure it answers and returns nil.
func ReadResolve(w http.ResponseWriter, r *http.Request, keyHash string) *middleware.Resolution {
	var req ResolveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		WriteJSON(w, http.StatusBadRequest, Error{Error: "resolve body: " + err.Error() +
			` (want {"status":201,"headers":{"Content-Type":["application/json"]},"body":"…"} or "body_base64")`, KeyHash: keyHash})
		return nil
	}
	body := []byte(req.Body)
	if req.BodyBase64 != "" {
		if req.Body != "" {
			WriteJSON(w, http.StatusBadRequest, Error{Error: "resolve body: give body or body_base64, not both", KeyHash: keyHash})
			return nil
		}
		var err error
		if body, err = base64.StdEncoding.DecodeString(req.BodyBase64); err != nil {
			WriteJSON(w, http.StatusBadRequest, Error{Error: "resolve body: body_base64: " + err.Error(), KeyHash: keyHash})
			return nil
		}
	}
	res := &middleware.Resolution{Status: req.Status, Header: req.Headers, Body: body}
	if err := res.Validate(); err != nil {
		WriteJSON(w, http.StatusBadRequest, Error{Error: err.Error(), KeyHash: keyHash})
		return nil
	}
	return res
}

// Key is the record an admin request names: its store key, its hash as the
// logs print it, and the answer when it is not found.
type Key struct {
	StoreKey, KeyHash string
	NotFound          any
}

// GetOrDelete reads (GET) or purges (DELETE) the record k names in store,
// and answers. It reports whether a record was purged.
func GetOrDelete(w http.ResponseWriter, r *http.Request, store cache.Store, k Key) (purged bool) {
	ctx, cancel := context.WithTimeout(r.Context(), OpTimeout)
	defer cancel()
	if r.Method == http.MethodDelete {
		err := store.Delete(ctx, k.StoreKey)
		switch {
		case errors.Is(err, cache.ErrNotFound):
			WriteJSON(w, http.StatusNotFound, k.NotFound)
		case err != nil:
			WriteJSON(w, http.StatusServiceUnavailable, Error{Error: err.Error(), KeyHash: k.KeyHash})
		default:
			WriteJSON(w, http.StatusOK, map[string]any{"deleted": true, "key_hash": k.KeyHash})
			return true
		}
		return false
	}
	rec, err := store.Get(ctx, k.StoreKey)
	switch {
	case errors.Is(err, cache.ErrNotFound):
		WriteJSON(w, http.StatusNotFound, k.NotFound)
		return false
	case err != nil:
		WriteJSON(w, http.StatusServiceUnavailable, Error{Error: err.Error(), KeyHash: k.KeyHash})
		return false
	}
	out := Record(k.KeyHash, rec)
	if jobs, ok := store.(cache.Reconciler); ok {
		if job, err := jobs.GetReconcile(ctx, k.StoreKey); err == nil {
			out.Reconcile = Reconcile(job)
		}
	}
	WriteJSON(w, http.StatusOK, out)
	return false
}

// Settlement is what Settle did.
type Settlement int

// Settlements.
const (
	NotSettled Settlement = iota
	Released
	Resolved
)

// Settle releases (res nil) or resolves (with res) the held unknown outcome k
// names through core, whose store is store, and answers, with the record's
// history: a released record's last, since the release deletes it.
func Settle(w http.ResponseWriter, r *http.Request, core *middleware.Handler, store cache.Store, k Key, res *middleware.Resolution) Settlement {
	ctx, cancel := context.WithTimeout(r.Context(), OpTimeout)
	defer cancel()
	info, err := core.Settle(ctx, k.StoreKey, res, cache.ByOperator)
	switch {
	case errors.Is(err, cache.ErrNotFound):
		WriteJSON(w, http.StatusNotFound, k.NotFound)
	case errors.Is(err, cache.ErrNotUnknown):
		WriteJSON(w, http.StatusConflict, Error{Error: "not an unknown outcome: release and resolve apply to held unknown outcomes (DELETE purges any record)", KeyHash: k.KeyHash})
	case err != nil:
		WriteJSON(w, http.StatusServiceUnavailable, Error{Error: err.Error(), KeyHash: k.KeyHash})
	case res != nil:
		out := map[string]any{"resolved": true, "key_hash": k.KeyHash}
		if rec, err := store.Get(ctx, k.StoreKey); err == nil {
			out["record"] = Record(k.KeyHash, rec)
		}
		WriteJSON(w, http.StatusOK, out)
		return Resolved
	default:
		out := map[string]any{"released": true, "key_hash": k.KeyHash}
		if req := Request(info); req != nil {
			out["request"] = req
		}
		if h := History(info); len(h) > 0 {
			out["history"] = h
		}
		WriteJSON(w, http.StatusOK, out)
		return Released
	}
	return NotSettled
}
