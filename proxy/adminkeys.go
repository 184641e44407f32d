package proxy

// The admin API's keys: looking a client's key up in its scope, reading,
// purging, releasing and resolving its record.

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/middleware"
)

// The admin API's JSON shapes (package adminkeys, shared with Caddy's admin
// API).
type (
	KeyRecord      = adminkeys.KeyRecord
	KeyReconcile   = adminkeys.KeyReconcile
	KeyResponse    = adminkeys.KeyResponse
	ResolveRequest = adminkeys.ResolveRequest
	HeldKey        = adminkeys.HeldKey
	HeldPage       = adminkeys.HeldPage
)

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
	if adminkeys.GetOrDelete(w, r, st.cache, l.key()) {
		p.log.Info("record purged through the admin API", "key_hash", l.keyHash)
	}
}

// key is the record l names, for package adminkeys.
func (l *keyLookup) key() adminkeys.Key {
	return adminkeys.Key{StoreKey: l.storeKey, KeyHash: l.keyHash, NotFound: l.notFound}
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
	var res *middleware.Resolution
	if strings.HasPrefix(r.URL.Path, "/resolve") {
		if res = adminkeys.ReadResolve(w, r, l.keyHash); res == nil {
			return
		}
	}
	switch adminkeys.Settle(w, r, l.rt.h, st.cache, l.key(), res) {
	case adminkeys.Resolved:
		p.log.Warn("unknown outcome resolved through the admin API; retries get the given response", "key_hash", l.keyHash, "status", res.Status)
		p.metrics.settled.Resolved()
	case adminkeys.Released:
		p.log.Warn("unknown outcome released through the admin API; the next retry runs", "key_hash", l.keyHash)
		p.metrics.settled.Released()
	}
}
