package admin

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

// lookupScope names the scope of a lookup; header values are never shown.
type lookupScope struct {
	Host    string   `json:"host"`
	Route   string   `json:"route"`
	Headers []string `json:"headers_given"`
	Hint    string   `json:"hint"`
}

// keyLookup is an admin request's key, resolved to a route and a store key.
type keyLookup struct {
	rt       Route
	storeKey string
	keyHash  string
	notFound adminError
}

// lookupKey rebuilds the request as the client would have sent it, for the scope.
func (a *api) lookupKey(v View, r *http.Request) (*keyLookup, error) {
	key, err := middleware.ParseKey([]string{r.PathValue("key")})
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	rt := v.Default()
	if path := q.Get("path"); path != "" {
		if _, _, err := middleware.CanonicalPath(path); err != nil {
			return nil, fmt.Errorf("path: %w", err)
		}
		rt = routeForPath(v, path)
	}
	host := q.Get("host")
	if !q.Has("host") {
		host = v.Host()
	}
	client := &http.Request{Method: http.MethodPost, Host: host, Header: http.Header{}, URL: &url.URL{Path: q.Get("path")}}
	for name, vals := range r.Header {
		if name == "Authorization" && a.token != "" {
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
	storeKey := rt.Core.StoreKey(client, key)
	given := make([]string, 0, len(client.Header))
	for name := range client.Header {
		given = append(given, name)
	}
	sort.Strings(given)
	l := &keyLookup{rt: rt, storeKey: storeKey, keyHash: storeKey[:12]}
	l.notFound = adminError{Error: "not found", KeyHash: l.keyHash, Scope: &lookupScope{Host: host, Route: rt.name(), Headers: given,
		Hint: "a key is scoped by the Host and the scope headers (Authorization by default) the client sent: pass the same --host and --header"}}
	return l, nil
}

// routeForPath is the route whose settings apply to a request for path (the
// top level when path is not canonical).
func routeForPath(v View, path string) Route {
	_, route, err := middleware.CanonicalPath(path)
	if err != nil {
		return v.Default()
	}
	return v.Match(route)
}

// byKey serves an endpoint of a client's key ({key}, in the scope the
// request gives): op (recordOp: GET and DELETE /keys/{key}; settle: POST
// /release/{key} and /resolve/{key}) on the record it names.
func (a *api) byKey(op func(*api, http.ResponseWriter, *http.Request, View, *keyLookup)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := a.view(w, r)
		if v == nil {
			return
		}
		defer v.Release()
		l, err := a.lookupKey(v, r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, adminError{Error: err.Error()})
			return
		}
		op(a, w, r, v, l)
	}
}

// recordOp reads (GET) or purges (DELETE) the record l names.
func (a *api) recordOp(w http.ResponseWriter, r *http.Request, v View, l *keyLookup) {
	if adminkeys.GetOrDelete(w, r, v.Store(), l.key()) {
		a.log.Info("record purged through the admin API", "key_hash", l.keyHash)
	}
}

// key is the record l names, for package adminkeys.
func (l *keyLookup) key() adminkeys.Key {
	return adminkeys.Key{StoreKey: l.storeKey, KeyHash: l.keyHash, NotFound: l.notFound}
}

// settle releases or resolves (by the request's path) the record l names: a
// held unknown outcome, in one atomic store operation.
func (a *api) settle(w http.ResponseWriter, r *http.Request, v View, l *keyLookup) {
	var res *middleware.Resolution
	if strings.HasPrefix(r.URL.Path, "/resolve") {
		if res = adminkeys.ReadResolve(w, r, l.keyHash); res == nil {
			return
		}
	}
	switch s := adminkeys.Settle(w, r, l.rt.Core, v.Store(), l.key(), res); s {
	case adminkeys.Resolved:
		a.log.Warn("unknown outcome resolved through the admin API; retries get the given response", "key_hash", l.keyHash, "status", res.Status)
		a.s.Settled(s)
	case adminkeys.Released:
		a.log.Warn("unknown outcome released through the admin API; the next retry runs", "key_hash", l.keyHash)
		a.s.Settled(s)
	}
}
