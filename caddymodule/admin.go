package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/middleware"
)

func init() { caddy.RegisterModule(Admin{}) }

// Admin is admin.api.idempotency: the idempotency keys of the running
// config's handlers under Caddy's admin API, as idemproxy's admin API has
// them (package adminkeys serves both), by the key hash the logs print:
//
//	GET    /idempotency/handlers            the handlers: name, store
//	GET    /idempotency/readyz              200 when the stores answer, else 503 (idemproxy's /readyz)
//	GET    /idempotency/keys?hash=H         the record whose key hash begins with H
//	DELETE /idempotency/keys?hash=H         purge it (an in-flight key may then run again)
//	POST   /idempotency/release?hash=H      release a held unknown outcome: the next retry runs
//	POST   /idempotency/resolve?hash=H      resolve it with the response its retries get
//	                                        (JSON body: {"status":201,"headers":{…},"body":"…"})
//	GET    /idempotency/keys?state=held     the held unknown outcomes, a page at a time
//	                                        (?limit=, ?cursor=)
//	GET    /idempotency/ui/                 the operator console (package console)
//
// A POST must be Content-Type: application/json (release's empty body
// too), or it is refused with 415, as idemproxy's admin listener refuses it.
// H is 12 to 64 hex digits (the key_hash of the logs, or a listing's hash).
// ?handler=NAME picks the handler whose name subdirective is NAME (the
// newest config's); without it, the newest handler serves when every handler
// uses one store (one URL and the same settings: two prefixes on one Redis
// are two stores), and with more the request is refused. The store is pinned
// while the operation runs: a reload meanwhile closes it only after.
type Admin struct{}

// CaddyModule returns the Caddy module information.
func (Admin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.idempotency", New: func() caddy.Module { return Admin{} }}
}

// Routes implements caddy.AdminRouter.
func (a Admin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/idempotency/", Handler: caddy.AdminHandlerFunc(a.serve)}, consoleRoute()}
}

func (a Admin) serve(w http.ResponseWriter, r *http.Request) error {
	path := strings.TrimPrefix(r.URL.Path, "/idempotency")
	if r.Method == http.MethodGet && path == "/handlers" {
		adminkeys.WriteJSON(w, http.StatusOK, registry.list())
		return nil
	}
	if r.Method == http.MethodGet && path == "/readyz" {
		readyz(w, r)
		return nil
	}
	op := r.Method + " " + path
	switch op {
	case "GET /keys", "DELETE /keys", "POST /release", "POST /resolve":
	default:
		adminkeys.WriteJSON(w, http.StatusNotFound, adminkeys.Error{Error: "not found: GET /idempotency/handlers, GET /idempotency/readyz, GET or DELETE /idempotency/keys?hash=H, POST /idempotency/release?hash=H, POST /idempotency/resolve?hash=H, GET /idempotency/keys?state=held"})
		return nil
	}
	if r.Method == http.MethodPost && !isJSON(r.Header.Get("Content-Type")) {
		// As idemproxy's admin listener (internal/admin/guard.go): a web page
		// can make a browser send a form or text/plain POST to a loopback
		// port without a preflight, and one as JSON only after a CORS
		// preflight, which Caddy's admin endpoint never grants.
		adminkeys.WriteJSON(w, http.StatusUnsupportedMediaType, adminkeys.Error{Error: "a POST to the admin API must be Content-Type: application/json"})
		return nil
	}
	h, unpin, err := registry.pick(r.URL.Query().Get("handler"))
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errStoreClosed) {
			status = http.StatusServiceUnavailable
		}
		adminkeys.WriteJSON(w, status, adminkeys.Error{Error: err.Error()})
		return nil
	}
	defer unpin() // a reload meanwhile closes the store only after this operation
	store, _ := cache.Unwrap(h.store)
	q := r.URL.Query()
	if op == "GET /keys" && q.Has("state") {
		hold := h.core.Settings().UnknownHold
		adminkeys.Held(w, r, store, func(string) time.Duration { return hold })
		return nil
	}
	if !q.Has("hash") {
		adminkeys.WriteJSON(w, http.StatusBadRequest, adminkeys.Error{Error: "give ?hash=KEY_HASH (the key_hash the logs print), or ?state=held"})
		return nil
	}
	storeKey, status, body := adminkeys.FindHash(r.Context(), store, q.Get("hash"))
	if storeKey == "" {
		adminkeys.WriteJSON(w, status, body)
		return nil
	}
	k := adminkeys.Key{StoreKey: storeKey, KeyHash: storeKey[:12]}
	k.NotFound = adminkeys.Error{Error: "not found: settled or expired since it was looked up", KeyHash: k.KeyHash}
	log := caddy.Log().Named("admin.api.idempotency").Sugar()
	switch op {
	case "POST /release", "POST /resolve":
		var res *middleware.Resolution
		if op == "POST /resolve" {
			if res = adminkeys.ReadResolve(w, r, k.KeyHash); res == nil {
				return nil
			}
		}
		switch adminkeys.Settle(w, r, h.core, store, k, res) {
		case adminkeys.Resolved:
			log.Warnw("unknown outcome resolved through the admin API; retries get the given response", "key_hash", k.KeyHash, "status", res.Status)
		case adminkeys.Released:
			log.Warnw("unknown outcome released through the admin API; the next retry runs", "key_hash", k.KeyHash)
		}
	default:
		if adminkeys.GetOrDelete(w, r, store, k) {
			log.Infow("record purged through the admin API", "key_hash", k.KeyHash)
		}
	}
	return nil
}

// readyz answers whether the store answers, as idemproxy's GET /readyz:
// 200 {"status":"ready"}, or 503 {"status":"store unavailable"} with the
// store's error. ?handler=NAME asks that handler's store; without it, every
// store the running config's handlers use must answer. No handler: 503.
func readyz(w http.ResponseWriter, r *http.Request) {
	picked, err := registry.pickAll(r.URL.Query().Get("handler"))
	if err != nil {
		adminkeys.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "store unavailable", "error": err.Error()})
		return
	}
	defer func() {
		for _, p := range picked {
			p.unpin()
		}
	}()
	ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
	defer cancel()
	for _, p := range picked {
		if err := p.h.store.Ping(ctx); err != nil {
			adminkeys.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "store unavailable",
				"error": fmt.Sprintf("handler %q (%s): %v", p.h.Name, p.h.storeName, err)})
			return
		}
	}
	adminkeys.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// ReadyTimeout bounds GET /idempotency/readyz's wait for the stores, as
// idemproxy's /readyz waits for its store.
const ReadyTimeout = 2 * time.Second

// registry is the provisioned handlers, for the admin API: a handler joins
// it when provisioned and leaves at its cleanup, so that after a reload it
// holds the new config's.
var registry handlerRegistry

type handlerRegistry struct {
	mu       sync.Mutex
	handlers []*Handler // in the order provisioned
}

func (g *handlerRegistry) add(h *Handler) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handlers = append(g.handlers, h)
}

func (g *handlerRegistry) remove(h *Handler) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handlers = slices.DeleteFunc(g.handlers, func(x *Handler) bool { return x == h })
}

// handlerInfo is a handler in GET /idempotency/handlers.
type handlerInfo struct {
	Name  string `json:"name"`
	Store string `json:"store"`
}

func (g *handlerRegistry) list() []handlerInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := []handlerInfo{}
	for _, h := range g.handlers {
		out = append(out, handlerInfo{Name: h.Name, Store: h.storeName})
	}
	return out
}

// pick is the handler named name (the last provisioned: the newest
// config's), or, when name is empty, the last provisioned if every handler
// uses one store: one identity, as the store pool has it (Store's key,
// internal/stores.Key), so that two stores on one server (other prefixes,
// other tables) are two. It pins the handler's store for the caller's
// operation, whose end calls unpin; errStoreClosed when a reload closed it.
func (g *handlerRegistry) pick(name string) (h *Handler, unpin func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.handlers) == 0 {
		return nil, nil, fmt.Errorf("no idempotency handler in the running config")
	}
	var names []string
	storesSeen := map[string]bool{}
	for i := len(g.handlers) - 1; i >= 0; i-- {
		x := g.handlers[i]
		if h == nil && (name == "" || x.Name == name) {
			h = x
		}
		names = append(names, fmt.Sprintf("%q (%s)", x.Name, x.storeName))
		storesSeen[x.storeID] = true
	}
	switch {
	case h == nil:
		return nil, nil, fmt.Errorf("handler: no handler named %q; the handlers: %s", name, strings.Join(names, ", "))
	case name == "" && len(storesSeen) > 1:
		return nil, nil, fmt.Errorf("handler: the handlers use more than one store: pick one with ?handler=NAME (its name subdirective): %s", strings.Join(names, ", "))
	}
	unpin, ok := pinStore(h.store)
	if !ok {
		return nil, nil, fmt.Errorf("handler %q: %w", h.Name, errStoreClosed)
	}
	return h, unpin, nil
}

// pinnedHandler is a handler picked for an operation, its store pinned
// until unpin.
type pinnedHandler struct {
	h     *Handler
	unpin func()
}

// pickAll is, for readiness, the handler named name (as pick has it), or
// with no name the newest handler of each store the handlers use: each
// store pinned for the caller, who unpins them. A handler whose store a
// reload closed is left out (its config is going); none left is an error.
func (g *handlerRegistry) pickAll(name string) ([]pinnedHandler, error) {
	if name != "" {
		h, unpin, err := g.pick(name)
		if err != nil {
			return nil, err
		}
		return []pinnedHandler{{h, unpin}}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []pinnedHandler
	seen := map[string]bool{}
	for i := len(g.handlers) - 1; i >= 0; i-- {
		h := g.handlers[i]
		if seen[h.storeID] {
			continue
		}
		if unpin, ok := pinStore(h.store); ok {
			seen[h.storeID] = true
			out = append(out, pinnedHandler{h, unpin})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no idempotency handler in the running config")
	}
	return out, nil
}

// errStoreClosed: the picked handler's store was closed (its config is gone).
var errStoreClosed = errors.New("its store was closed by a config reload; try again")

// pinStore pins store for an admin operation (cache.Pinned), unless it is a
// pooled store already closed (false). A store that is not pooled is not
// closed by a reload: nothing to pin.
func pinStore(store cache.Store) (unpin func(), ok bool) {
	switch p := store.(type) {
	case *pooledStore:
		return p.pinOpen()
	case cache.Pinned:
		return p.Pin(), true
	}
	return func() {}, true
}

// isJSON reports whether a Content-Type is application/json (parameters such
// as charset allowed): the rule of idemproxy's admin listener.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// Interface guards.
var _ caddy.AdminRouter = Admin{}
