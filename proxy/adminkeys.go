package proxy

// The admin API's keys: looking a client's key up in its scope, reading,
// purging, releasing and resolving its record.

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

// KeyRecord is the JSON shape of GET /keys/{key}. Field order is stable.
type KeyRecord struct {
	KeyHash     string       `json:"key_hash"`
	State       string       `json:"state"`
	Fingerprint string       `json:"fingerprint"`
	CreatedAt   time.Time    `json:"created_at"`
	ExpiresAt   time.Time    `json:"expires_at"`
	Response    *KeyResponse `json:"response,omitempty"`
	// Reconcile is the key's reconcile job, while it has one (a held
	// unknown outcome of a route that reconciles).
	Reconcile *KeyReconcile `json:"reconcile,omitempty"`
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

// lookupScope names the scope of a lookup; header values are never shown.
type lookupScope struct {
	Host    string   `json:"host"`
	Route   string   `json:"route"`
	Headers []string `json:"headers_given"`
	Hint    string   `json:"hint"`
}

// keyLookup is an admin request's key, resolved to a route and a store key.
type keyLookup struct {
	rt       *route
	storeKey string
	keyHash  string
	notFound adminError
}

// lookupKey rebuilds the request as the client would have sent it, for the scope.
func (p *Proxy) lookupKey(st *state, r *http.Request) (*keyLookup, error) {
	key, err := middleware.ParseKey([]string{r.PathValue("key")})
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	rt := st.def
	if path := q.Get("path"); path != "" {
		if _, _, err := middleware.CanonicalPath(path); err != nil {
			return nil, fmt.Errorf("path: %w", err)
		}
		rt = st.routeForPath(path)
	}
	host := q.Get("host")
	if !q.Has("host") {
		host = st.cfg.Listen
		if p.listenAddr != "" {
			host = p.listenAddr // as bound: a port of 0 is the one chosen
		}
	}
	client := &http.Request{Method: http.MethodPost, Host: host, Header: http.Header{}, URL: &url.URL{Path: q.Get("path")}}
	for name, vals := range r.Header {
		if name == "Authorization" && st.cfg.AdminToken != "" {
			continue // the admin credential, not the client's
		}
		if name == "Content-Type" || name == "Content-Length" {
			continue // of the admin request's own body
		}
		client.Header[name] = vals
	}
	for name, vals := range q {
		if name != "host" && name != "path" {
			client.Header[http.CanonicalHeaderKey(name)] = vals
		}
	}
	storeKey := rt.h.StoreKey(client, key)
	routePath := rt.path
	if routePath == "" {
		routePath = "(top level)"
	}
	given := make([]string, 0, len(client.Header))
	for name := range client.Header {
		given = append(given, name)
	}
	sort.Strings(given)
	l := &keyLookup{rt: rt, storeKey: storeKey, keyHash: storeKey[:12]}
	l.notFound = adminError{Error: "not found", KeyHash: l.keyHash, Scope: &lookupScope{Host: host, Route: routePath, Headers: given,
		Hint: "a key is scoped by the Host and the scope headers (Authorization by default) the client sent: pass the same --host and --header"}}
	return l, nil
}

// routeForPath is the route whose settings apply to a request for path (the
// top level when path is not canonical).
func (st *state) routeForPath(path string) *route {
	_, route, err := middleware.CanonicalPath(path)
	if err != nil {
		return st.def
	}
	return st.match(route)
}

func (p *Proxy) adminKey(w http.ResponseWriter, r *http.Request) {
	st := p.acquire()
	defer st.release()
	l, err := p.lookupKey(st, r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, adminError{Error: err.Error()})
		return
	}
	p.keyRecordOp(w, r, st, l)
}

// keyRecordOp reads (GET) or purges (DELETE) the record l names.
func (p *Proxy) keyRecordOp(w http.ResponseWriter, r *http.Request, st *state, l *keyLookup) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if r.Method == http.MethodDelete {
		err := st.cache.Delete(ctx, l.storeKey)
		switch {
		case errors.Is(err, cache.ErrNotFound):
			writeJSON(w, http.StatusNotFound, l.notFound)
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, adminError{Error: err.Error(), KeyHash: l.keyHash})
		default:
			p.log.Info("record purged through the admin API", "key_hash", l.keyHash)
			writeJSON(w, http.StatusOK, map[string]any{"deleted": true, "key_hash": l.keyHash})
		}
		return
	}
	rec, err := st.cache.Get(ctx, l.storeKey)
	switch {
	case errors.Is(err, cache.ErrNotFound):
		writeJSON(w, http.StatusNotFound, l.notFound)
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, adminError{Error: err.Error(), KeyHash: l.keyHash})
		return
	}
	out := keyRecord(l.keyHash, rec)
	if jobs, ok := st.cache.(cache.Reconciler); ok {
		if job, err := jobs.GetReconcile(ctx, l.storeKey); err == nil {
			out.Reconcile = keyReconcile(job)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// keyReconcile shows a reconcile job; the path is shown without its query,
// which may carry the key.
func keyReconcile(job *cache.Job) *KeyReconcile {
	path, _, _ := strings.Cut(job.URL, "?")
	out := &KeyReconcile{State: job.State.String(), Request: job.Method + " " + path, Attempts: job.Attempts,
		Deadline: job.Deadline.UTC(), LastStatus: job.LastStatus, LastError: job.LastError}
	if job.State == cache.JobScheduled {
		out.NextAttempt = job.Due.UTC()
	}
	return out
}

// ResolveRequest is the JSON body of POST /resolve/{key}: the response every
// retry of the held request is answered with. Body is text; BodyBase64, when
// set, is the body as base64 instead.
type ResolveRequest struct {
	Status     int                 `json:"status"`
	Headers    map[string][]string `json:"headers"`
	Body       string              `json:"body"`
	BodyBase64 string              `json:"body_base64"`
}

// adminSettle serves POST /release/{key} and POST /resolve/{key}: it settles a
// held unknown outcome in one atomic store operation.
func (p *Proxy) adminSettle(w http.ResponseWriter, r *http.Request) {
	st := p.acquire()
	defer st.release()
	l, err := p.lookupKey(st, r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, adminError{Error: err.Error()})
		return
	}
	p.settle(w, r, st, l)
}

// settle releases or resolves (by the request's path) the record l names.
func (p *Proxy) settle(w http.ResponseWriter, r *http.Request, st *state, l *keyLookup) {
	var err error
	var res *middleware.Resolution
	resolving := strings.HasPrefix(r.URL.Path, "/resolve")
	if resolving {
		var req ResolveRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, adminError{Error: "resolve body: " + err.Error() +
				` (want {"status":201,"headers":{"Content-Type":["application/json"]},"body":"…"} or "body_base64")`, KeyHash: l.keyHash})
			return
		}
		body := []byte(req.Body)
		if req.BodyBase64 != "" {
			if req.Body != "" {
				writeJSON(w, http.StatusBadRequest, adminError{Error: "resolve body: give body or body_base64, not both", KeyHash: l.keyHash})
				return
			}
			if body, err = base64.StdEncoding.DecodeString(req.BodyBase64); err != nil {
				writeJSON(w, http.StatusBadRequest, adminError{Error: "resolve body: body_base64: " + err.Error(), KeyHash: l.keyHash})
				return
			}
		}
		res = &middleware.Resolution{Status: req.Status, Header: req.Headers, Body: body}
		if err := res.Validate(); err != nil {
			writeJSON(w, http.StatusBadRequest, adminError{Error: err.Error(), KeyHash: l.keyHash})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err = l.rt.h.Resolve(ctx, l.storeKey, res)
	switch {
	case errors.Is(err, cache.ErrNotFound):
		writeJSON(w, http.StatusNotFound, l.notFound)
	case errors.Is(err, cache.ErrNotUnknown):
		writeJSON(w, http.StatusConflict, adminError{Error: "not an unknown outcome: release and resolve apply to held unknown outcomes (DELETE purges any record)", KeyHash: l.keyHash})
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, adminError{Error: err.Error(), KeyHash: l.keyHash})
	case resolving:
		p.log.Warn("unknown outcome resolved through the admin API; retries get the given response", "key_hash", l.keyHash, "status", res.Status)
		p.metrics.settled.Resolved()
		out := map[string]any{"resolved": true, "key_hash": l.keyHash}
		if rec, err := st.cache.Get(ctx, l.storeKey); err == nil {
			out["record"] = keyRecord(l.keyHash, rec)
		}
		writeJSON(w, http.StatusOK, out)
	default:
		p.log.Warn("unknown outcome released through the admin API; the next retry runs", "key_hash", l.keyHash)
		p.metrics.settled.Released()
		writeJSON(w, http.StatusOK, map[string]any{"released": true, "key_hash": l.keyHash})
	}
}

func keyRecord(keyHash string, rec *cache.Record) KeyRecord {
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
	return out
}
