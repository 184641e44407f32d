package proxy_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// What an upstream saw of one request.
type seenRequest struct {
	at     time.Time
	method string
	uri    string // the request-target as sent
	host   string
	header http.Header
	status int
}

// scriptedUpstream serves with fn and keeps every request it saw.
type scriptedUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

func newScriptedUpstream(t *testing.T, fn func(w http.ResponseWriter, r *http.Request) int) *scriptedUpstream {
	u := &scriptedUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seenRequest{at: time.Now(), method: r.Method, uri: r.RequestURI, host: r.Host, header: r.Header.Clone()}
		s.status = fn(w, r)
		u.mu.Lock()
		u.seen = append(u.seen, s)
		u.mu.Unlock()
	}))
	t.Cleanup(u.Close)
	return u
}

// requests are the requests seen with method.
func (u *scriptedUpstream) requests(method string) []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []seenRequest
	for _, s := range u.seen {
		if s.method == method {
			out = append(out, s)
		}
	}
	return out
}

// reset closes the connection of w with RST: the upstream acted, and its
// answer is lost.
func reset(w http.ResponseWriter) int {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}
	return 0
}

// untilSettled posts key again and again until fn says the answer settles
// it; a 201 (the charge run a second time) fails the test unless rerun
// allows it. It returns the settling answer and when it came.
func untilSettled(t *testing.T, post func() testutil.Response, what string, rerun bool, settled func(testutil.Response) bool) (testutil.Response, time.Time) {
	t.Helper()
	var last testutil.Response
	testutil.Eventually(t, 20*time.Second, what, func() bool {
		last = post()
		if last.Status == 201 && !last.Replayed && !rerun {
			t.Fatalf("%s: the retry ran the charge a second time: %+v", what, last)
		}
		if settled(last) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
		return false
	})
	return last, time.Now()
}

// Issue 34 (2): a reconcile request goes to the Host the route's requests go
// to. Behind an upstream that hosts the API by name (an ingress, a
// multi-tenant API: any other Host is 404), a charge whose answer was lost is
// looked up on that host and found: the lookup's answer is stored, and the
// retry replays it; the charge ran once. Sent to the upstream URL's host, the
// lookup would be answered 404, the key released, and the retry would charge
// again. Under upstream_host client the Host is the client's (canonical), and
// under a literal one that literal. The lookup carries the forwarding headers
// of the original that name the site, not the client's address.
func TestE2EReconcileAsksTheVirtualHost(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct{ name, policy, clientHost string }{
		{"client", "client", "Shop.Example"},
		{"literal", "shop.example", "api.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			charged := map[string]int{}
			up := newScriptedUpstream(t, func(w http.ResponseWriter, r *http.Request) int {
				if !strings.EqualFold(r.Host, "shop.example") {
					w.WriteHeader(404) // another virtual host: nothing here
					return 404
				}
				switch {
				case r.Method == "POST" && r.URL.Path == "/charges":
					key := r.Header.Get("Idempotency-Key")
					mu.Lock()
					charged[key]++
					n := charged[key]
					mu.Unlock()
					if n == 1 {
						return reset(w)
					}
					w.WriteHeader(201)
					fmt.Fprintf(w, `{"id":"ch_%s","run":%d}`, key, n)
					return 201
				case r.Method == "GET" && r.URL.Path == "/lookup":
					key := r.URL.Query().Get("key")
					mu.Lock()
					n := charged[key]
					mu.Unlock()
					if n == 0 {
						w.WriteHeader(404)
						return 404
					}
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"id":"ch_%s","status":"succeeded"}`, key)
					return 200
				}
				w.WriteHeader(400)
				return 400
			})
			p := startConfig(t, "upstream: "+up.URL+`
upstream_host: `+tc.policy+`
upstream_timeout: 2s
routes:
  - path: /charges
    reconcile: GET /lookup?key={key}
    reconcile_delay: 300ms
    reconcile_max_delay: 1s
    reconcile_attempts: 4
    reconcile_timeout: 1s
`)
			post := func() testutil.Response {
				return p.Send(t, testutil.Request{Target: "/charges", Key: "vh-1", Host: tc.clientHost, Body: `{"amount":1}`})
			}
			if r := post(); r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
				t.Fatalf("first answer %d %s, want the held outcome-unknown answer", r.Status, r.Body)
			}
			r, _ := untilSettled(t, post, "the lookup's answer replayed", false, func(r testutil.Response) bool { return r.Status != 502 })
			if r.Status != 200 || !r.Replayed || r.Body != `{"id":"ch_vh-1","status":"succeeded"}` {
				t.Fatalf("settled with %+v, want the lookup's answer replayed", r)
			}
			mu.Lock()
			n := charged["vh-1"]
			mu.Unlock()
			if n != 1 {
				t.Fatalf("charged %d times, want once", n)
			}
			posts, lookups := up.requests("POST"), up.requests("GET")
			if len(lookups) != 1 || lookups[0].status != 200 || lookups[0].host != "shop.example" {
				t.Fatalf("lookups %+v, want one, on Host shop.example", lookups)
			}
			orig, l := posts[0].header, lookups[0].header
			for _, name := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
				if l.Get(name) == "" || l.Get(name) != orig.Get(name) {
					t.Errorf("lookup %s %q, the original's %q: want the same", name, l.Get(name), orig.Get(name))
				}
			}
			if l.Get("X-Forwarded-For") != "" || strings.Contains(l.Get("Forwarded"), "for=") || !strings.Contains(l.Get("Forwarded"), "proto=http") {
				t.Errorf("lookup X-Forwarded-For %q, Forwarded %q: want no client address, the site's proto and host", l.Get("X-Forwarded-For"), l.Get("Forwarded"))
			}
			if id := l.Get("X-Request-Id"); id == "" || id == orig.Get("X-Request-Id") {
				t.Errorf("lookup request id %q (the original's %q): want one of its own", id, orig.Get("X-Request-Id"))
			}
		})
	}
}

// Issue 34 (3): "not found" from an upstream still working on the original
// means "not yet". Here the proxy gives up on the charge at handler_timeout
// (500ms); the upstream goes on for 2s. A charge that succeeds is found by a
// later lookup, never released before it: its retries are held, then replay
// the lookup's answer, and it ran once. One that fails is released, but only
// once the original can no longer be running (upstream_timeout, 3s, after it
// was sent) and after a second not-found answer: only then does a retry run.
func TestE2EReconcileWaitsForTheOriginal(t *testing.T) {
	skipShort(t)
	var mu sync.Mutex
	charged, executed := map[string]bool{}, map[string]int{}
	up := newScriptedUpstream(t, func(w http.ResponseWriter, r *http.Request) int {
		switch {
		case r.Method == "POST" && r.URL.Path == "/charges":
			key := r.Header.Get("Idempotency-Key")
			mu.Lock()
			executed[key]++
			n := executed[key]
			mu.Unlock()
			if n == 1 {
				time.Sleep(2 * time.Second) // working on it, whoever waits
				mu.Lock()
				charged[key] = strings.HasPrefix(key, "ok-")
				mu.Unlock()
			}
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"id":"ch_%s","run":%d}`, key, n)
			return 201
		case r.Method == "GET" && r.URL.Path == "/lookup":
			mu.Lock()
			ok := charged[r.URL.Query().Get("key")]
			mu.Unlock()
			if !ok {
				w.WriteHeader(404)
				return 404
			}
			fmt.Fprint(w, `{"status":"succeeded"}`)
			return 200
		}
		w.WriteHeader(400)
		return 400
	})
	p := startConfig(t, "upstream: "+up.URL+`
upstream_timeout: 3s
routes:
  - path: /charges
    handler_timeout: 500ms
    reconcile: GET /lookup?key={key}
    reconcile_delay: 300ms
    reconcile_max_delay: 1s
    reconcile_attempts: 5
    reconcile_window: 1m
    reconcile_timeout: 1s
`)
	const upstreamTimeout = 3 * time.Second
	for _, key := range []string{"ok-1", "fail-1"} {
		t.Run(key, func(t *testing.T) {
			post := func() testutil.Response { return p.Post(t, "/charges", key, `{"amount":1}`) }
			sent := time.Now() // the proxy sends it after this
			if r := post(); r.Status != 504 || !strings.Contains(r.Body, "outcome-unknown") {
				t.Fatalf("first answer %d %s, want the held outcome-unknown answer (handler_timeout)", r.Status, r.Body)
			}
			var lookups []seenRequest
			lookupsOf := func() []seenRequest {
				var out []seenRequest
				for _, l := range up.requests("GET") {
					if strings.HasSuffix(l.uri, "="+key) {
						out = append(out, l)
					}
				}
				return out
			}
			if key == "ok-1" {
				r, _ := untilSettled(t, post, "the lookup's answer replayed", false, func(r testutil.Response) bool { return r.Status != 504 })
				if r.Status != 200 || !r.Replayed || r.Body != `{"status":"succeeded"}` {
					t.Fatalf("settled with %+v, want the lookup's answer replayed", r)
				}
				lookups = lookupsOf()
				if len(lookups) < 2 || lookups[0].status != 404 || lookups[len(lookups)-1].status != 200 {
					t.Fatalf("lookups %+v: want a not-found answer while the upstream worked, then found", lookups)
				}
			} else {
				_, at := untilSettled(t, post, "the retry to run", true, func(r testutil.Response) bool { return r.Status == 201 })
				lookups = lookupsOf()
				if len(lookups) < 2 || at.Sub(sent) < upstreamTimeout {
					t.Fatalf("released %v after the charge was sent, after %d lookups; want no earlier than upstream_timeout (%v), after 2",
						at.Sub(sent), len(lookups), upstreamTimeout)
				}
			}
			// Every not-found answer after the first came once the original
			// could no longer be running.
			for i, l := range lookups[1:] {
				if l.status == 404 && l.at.Sub(sent) < upstreamTimeout {
					t.Errorf("lookup %d at %v after the charge was sent: before upstream_timeout, no lookup but the first", i+2, l.at.Sub(sent))
				}
			}
			mu.Lock()
			n := executed[key]
			mu.Unlock()
			if want := map[string]int{"ok-1": 1, "fail-1": 2}[key]; n != want {
				t.Fatalf("executed %d times, want %d", n, want)
			}
		})
	}
}

// Issue 34 (4): a client's key never moves the reconcile request. Behind an
// upstream that normalises paths as RFC 3986 (and nginx, Apache, Tomcat) do,
// a key "..", "%2e%2e" or "..;" rendered into /v1/charges/{key}/status would
// reach another path, whose 200 would become the key's stored answer. None is
// rendered: no reconcile request is sent for it, the key stays held for an
// operator, and the log says why and where the placeholder can go. A key that
// is one literal segment is looked up as before.
func TestE2EReconcileKeyCannotMoveThePath(t *testing.T) {
	skipShort(t)
	var mu sync.Mutex
	executed := map[string]int{}
	up := newScriptedUpstream(t, func(w http.ResponseWriter, r *http.Request) int {
		if r.Method == "POST" {
			key := r.Header.Get("Idempotency-Key")
			mu.Lock()
			executed[key]++
			mu.Unlock()
			return reset(w)
		}
		// Decode twice, drop ;parameters, resolve dot segments.
		p, _ := url.PathUnescape(r.URL.Path)
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		p = path.Clean(strings.Join(segs, "/"))
		if rest, ok := strings.CutPrefix(p, "/v1/charges/ok-"); ok && strings.HasSuffix(rest, "/status") {
			fmt.Fprint(w, `{"status":"succeeded"}`)
			return 200
		}
		fmt.Fprintf(w, `{"resource":%q}`, p) // another resource, answered all the same
		return 200
	})
	p := startConfig(t, "upstream: "+up.URL+`
upstream_timeout: 2s
routes:
  - path: /v1/charges
    reconcile: GET /v1/charges/{key}/status
    reconcile_delay: 300ms
    reconcile_timeout: 1s
`)
	hostile := []string{"..", ".", "%2e%2e", "%252E%252E", "..;", "a/../..", "k."}
	for _, key := range append(hostile, "ok-1") {
		if r := p.Post(t, "/v1/charges", key, "{}"); r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
			t.Fatalf("%q: first answer %d %s, want the held outcome-unknown answer", key, r.Status, r.Body)
		}
	}
	untilSettled(t, func() testutil.Response { return p.Post(t, "/v1/charges", "ok-1", "{}") }, "ok-1 to settle", false,
		func(r testutil.Response) bool { return r.Status == 200 && r.Replayed })
	for _, l := range up.requests("GET") {
		if l.uri != "/v1/charges/ok-1/status" {
			t.Errorf("the upstream was asked GET %s: a key moved the reconcile request", l.uri)
		}
	}
	for _, key := range hostile {
		if r := p.Post(t, "/v1/charges", key, "{}"); r.Status != 502 || !r.Replayed || !strings.Contains(r.Body, "outcome-unknown") {
			t.Errorf("%q: %d %s, want still held", key, r.Status, r.Body)
		}
	}
	mu.Lock()
	for _, key := range hostile {
		if executed[key] != 1 {
			t.Errorf("%q executed %d times", key, executed[key])
		}
	}
	mu.Unlock()
	logs := p.Logs.String()
	if n := strings.Count(logs, "in the path it could move the request to another path on the upstream, so none is sent; place {key} in the query instead"); n != len(hostile) {
		t.Errorf("%d log lines say why a key is not reconciled, want %d:\n%s", n, len(hostile), logs)
	}
	for _, key := range hostile {
		if len(key) > 3 && strings.Contains(logs, key) {
			t.Errorf("the log has the raw key %q", key)
		}
	}
}
