package proxy

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

// AdminHandler serves the admin API:
//
//	GET    /healthz        the process is up
//	GET    /readyz         the store answers
//	GET    /metrics        Prometheus metrics (internal/metrics)
//	GET    /keys/{key}     the record for key, as JSON
//	DELETE /keys/{key}     purge it (an in-flight key may then run again)
//	POST   /release/{key}  release a key held with an unknown outcome: the next
//	                       retry runs (409 if the record is not an unknown outcome)
//	POST   /resolve/{key}  resolve a key held with an unknown outcome with the
//	                       response its retries get (JSON ResolveRequest body;
//	                       409 if the record is not an unknown outcome)
//	GET    /debug/pprof/   Go profiles (CPU, heap, goroutines, trace)
//
// Every POST is Content-Type: application/json (415 otherwise).
//
// For /keys, the scope is given as the client gave it: ?host=… (default: the
// --listen address, which is what clients calling it by that address send), and
// each scope header either as the same header on the admin request or as a query
// parameter of that name (?authorization=Bearer%20…).
// ?path=/route picks the route whose settings apply (default: the top level).
//
// With admin_token set, every endpoint but /healthz requires
// "Authorization: Bearer <token>" (401 otherwise), and the Authorization header of
// an admin request is that token, never a scope header.
//
// With or without a token, what a web page can make a browser send is refused
// (see refuseBrowsers).
func (p *Proxy) AdminHandler() http.Handler {
	return p.refuseBrowsers(p.adminHandler())
}

func (p *Proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := p.store.Ping(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "store unavailable", "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", p.metrics.handler)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /keys/{key...}", p.adminKey)
	mux.HandleFunc("DELETE /keys/{key...}", p.adminKey)
	mux.HandleFunc("POST /release/{key...}", p.adminSettle)
	mux.HandleFunc("POST /resolve/{key...}", p.adminSettle)
	if p.cfg.AdminToken == "" {
		return mux
	}
	want := []byte("Bearer " + p.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemproxy admin"`)
			writeJSON(w, http.StatusUnauthorized, adminError{Error: "admin token required (Authorization: Bearer …)"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// MetricsHandler serves /metrics and /healthz alone, without a token: for
// Prometheus on a listener of its own. A request with an Origin header (a web
// page) is refused; any Host is served, since Prometheus often scrapes by a
// DNS name and these read-only counts are no secret a rebound page could use.
func (p *Proxy) MetricsHandler() http.Handler {
	next := p.metricsHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header["Origin"]) > 0 {
			writeJSON(w, http.StatusForbidden, adminError{Error: "a request with an Origin header is refused: the metrics listener does not serve browsers"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (p *Proxy) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET /metrics", p.metrics.handler)
	return mux
}

// refuseBrowsers keeps web pages out of the admin listener, token
// or not. A page can make a browser send requests to a loopback port: a form
// POST or a text/plain fetch (no preflight) could release a held key or resolve
// it to HTML every retry then replays, and a page whose name it rebinds to
// 127.0.0.1 (DNS rebinding) could read /keys and pprof as same-origin. So:
//
//   - a request with an Origin header is refused (403): browsers send it on
//     cross-origin requests and on every POST; the admin tools never do;
//   - so is a Host that is not an IP address or localhost, or a name listed in
//     admin_hosts (403): DNS rebinding needs a name the attacker controls;
//   - a POST must be Content-Type: application/json (415): a browser sends
//     that cross-origin only after a CORS preflight, which is never granted.
//
// The token, when set, authenticates on top of this against whoever can reach
// the port; these rules stop browsers only.
func (p *Proxy) refuseBrowsers(next http.Handler) http.Handler {
	names := map[string]bool{}
	for _, h := range p.cfg.AdminHosts {
		names[normalHost(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case len(r.Header["Origin"]) > 0:
			writeJSON(w, http.StatusForbidden, adminError{Error: "a request with an Origin header is refused: the admin API does not serve browsers"})
		case !adminHostAllowed(r.Host, names):
			writeJSON(w, http.StatusForbidden, adminError{Error: "the Host is refused: call the admin API by IP address or localhost, or list its host name in admin_hosts"})
		case r.Method == http.MethodPost && !isJSON(r.Header.Get("Content-Type")):
			writeJSON(w, http.StatusUnsupportedMediaType, adminError{Error: "a POST to the admin API must be Content-Type: application/json"})
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// adminHostAllowed reports whether a request's Host (with or without port) is
// an IP literal, localhost, or one of names (admin_hosts; any case, a trailing
// dot ignored).
func adminHostAllowed(hostport string, names map[string]bool) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = normalHost(host)
	return host == "localhost" || names[host]
}

// normalHost is a host name as admin_hosts compares it: lower case, without a
// trailing dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// isJSON reports whether a Content-Type is application/json (parameters such
// as charset allowed).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// KeyRecord is the JSON shape of GET /keys/{key}. Field order is stable.
type KeyRecord struct {
	KeyHash     string       `json:"key_hash"`
	State       string       `json:"state"`
	Fingerprint string       `json:"fingerprint"`
	CreatedAt   time.Time    `json:"created_at"`
	ExpiresAt   time.Time    `json:"expires_at"`
	Response    *KeyResponse `json:"response,omitempty"`
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

type adminError struct {
	Error   string `json:"error"`
	KeyHash string `json:"key_hash,omitempty"`
	// Scope is what the key was looked up under, on a miss: a key is scoped by
	// the Host and the scope headers the client sent.
	Scope *lookupScope `json:"scope,omitempty"`
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
func (p *Proxy) lookupKey(r *http.Request) (*keyLookup, error) {
	key, err := middleware.ParseKey([]string{r.PathValue("key")})
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	rt := p.def
	if path := q.Get("path"); path != "" {
		_, route, err := middleware.CanonicalPath(path)
		if err != nil {
			return nil, fmt.Errorf("path: %w", err)
		}
		rt = p.match(route)
	}
	host := q.Get("host")
	if !q.Has("host") {
		host = p.cfg.Listen
	}
	client := &http.Request{Method: http.MethodPost, Host: host, Header: http.Header{}, URL: &url.URL{Path: q.Get("path")}}
	for name, vals := range r.Header {
		if name == "Authorization" && p.cfg.AdminToken != "" {
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

func (p *Proxy) adminKey(w http.ResponseWriter, r *http.Request) {
	l, err := p.lookupKey(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, adminError{Error: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if r.Method == http.MethodDelete {
		err := p.store.Delete(ctx, l.storeKey)
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
	rec, err := p.store.Get(ctx, l.storeKey)
	switch {
	case errors.Is(err, cache.ErrNotFound):
		writeJSON(w, http.StatusNotFound, l.notFound)
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, adminError{Error: err.Error(), KeyHash: l.keyHash})
		return
	}
	writeJSON(w, http.StatusOK, keyRecord(l.keyHash, rec))
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
	l, err := p.lookupKey(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, adminError{Error: err.Error()})
		return
	}
	var res *middleware.Resolution
	resolving := strings.HasPrefix(r.URL.Path, "/resolve/")
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
		if rec, err := p.store.Get(ctx, l.storeKey); err == nil {
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
