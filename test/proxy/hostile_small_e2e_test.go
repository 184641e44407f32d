package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// A keyed POST that asks to switch protocols is refused before anything is
// claimed or forwarded: an upstream that acted and answered 101 would leave no
// answer to store, and every retry would run again. An Upgrade header alone, or a
// Connection header naming upgrade alone, is enough.
func TestE2EUpgradeOnAKeyedRequestIsRefused(t *testing.T) {
	skipShort(t)
	up := testutil.NewRawUpstream(t, "upgrade")
	p := start(t, "--upstream", "http://"+up.Addr())
	for _, c := range []struct{ name, headers string }{
		{"upgrade and connection", "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"},
		{"upgrade alone", "Upgrade: h2c\r\n"},
		{"connection alone", "Connection: upgrade\r\n"},
	} {
		req := "POST /charges HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key: up-" + strings.ReplaceAll(c.name, " ", "-") +
			"\r\n" + c.headers + "Content-Length: 1\r\n\r\nx"
		before := up.Count.Load()
		var got []string
		for range 2 { // the request and its retry, once the first has settled
			deadline := time.Now().Add(5 * time.Second)
			for {
				a := testutil.RawExchange(t, p.Addr, req)
				if a.Status == 409 && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond) // the first still holds its switched connection
					continue
				}
				got = append(got, fmt.Sprint(a.Status, " ", a.Header.Get("Idempotency-Problem")))
				break
			}
		}
		want := "400 urn:idemproxy:problem:upgrade-refused"
		if n := up.Count.Load() - before; n != 0 || got[0] != want || got[1] != want {
			t.Fatalf("%s: answered %q, the upstream executed it %d times; want %q twice and no execution", c.name, got, n, want)
		}
	}
	// Without a key nothing is promised: the upgrade passes through as before.
	status := testutil.RawExchange(t, p.Addr, "POST /ws HTTP/1.1\r\nHost: api.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 1\r\n\r\nx").Status
	if status != 101 || up.Count.Load() != 1 {
		t.Fatalf("an upgrade without a key: %d (upstream %d), want the upstream's 101", status, up.Count.Load())
	}
}

// With scope_headers Cookie:session, two clients whose session cookies differ
// only in bytes Go's cookie parser drops (an escaped quoted value, a non-ASCII
// value, a session after 3000 other cookies) are in different scopes: the second
// client's request under the same key runs and is not answered the first's
// response.
func TestE2ECookieScopeUsesTheRawValue(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--scope-headers", "Cookie:session")
	var many strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&many, "c%d=%d; ", i, i)
	}
	for _, c := range []struct{ name, a, b string }{
		{"escaped quoted value", `session="a\054b"`, `session="a\054c"`},
		{"non-ASCII value", "session=caf\u00e9-1", "session=caf\u00e9-2"},
		{"after 3000 cookies", many.String() + "session=alice", many.String() + "session=mallory"},
		{"plain values", "theme=dark; session=s1", "theme=dark; session=s2"},
	} {
		key := "ck-" + strings.ReplaceAll(c.name, " ", "-")
		first := p.Post(t, "/pay", key, "same body", "Cookie", c.a)
		second := p.Post(t, "/pay", key, "same body", "Cookie", c.b)
		if first.Status != 201 || second.Status != 201 || second.Replayed || up.Count(key) != 2 {
			t.Errorf("%s: the second session got %d replayed=%v %q (upstream ran %d); want its own execution, not the first session's answer",
				c.name, second.Status, second.Replayed, second.Body, up.Count(key))
		}
		// Each session's own retry is still replayed.
		if again := p.Post(t, "/pay", key, "same body", "Cookie", c.a); !again.Replayed || again.Body != first.Body {
			t.Errorf("%s: the first session's retry: replayed=%v %q, want its own answer %q", c.name, again.Replayed, again.Body, first.Body)
		}
	}
}

// The template error format fills each placeholder of the template once: text
// that came from a value is never rescanned, so a detail naming "{code}" (here
// the JSON pointer of the key source, which the missing-key detail quotes)
// comes back verbatim.
func TestE2ETemplateFormatDoesNotRefillValues(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--require-key", "--key-source", "json:/{code}",
		"--error-format", `{"error":{"code":"{code}","message":"{detail}"}}`)
	r := p.Post(t, "/pay", "", `{"other":1}`, "Content-Type", "application/json")
	var got struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal([]byte(r.Body), &got)
	if r.Status != 400 || got.Error.Code != "missing_key" || !strings.Contains(got.Error.Message, "/{code}") {
		t.Fatalf("missing key in the template format: %d %s; want the detail naming /{code} verbatim", r.Status, r.Body)
	}
}

// redisHolding returns where, in every key and value of the Redis at rs, the
// bytes of s occur ("" when nowhere).
func redisHolding(t *testing.T, rs *redistest.Server, s string) string {
	t.Helper()
	ctx := context.Background()
	c := rs.Client()
	var found []string
	iter := c.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		var vals []string
		switch typ := c.Type(ctx, k).Val(); typ {
		case "string":
			vals = []string{c.Get(ctx, k).Val()}
		case "hash":
			for f, v := range c.HGetAll(ctx, k).Val() {
				vals = append(vals, f, v)
			}
		case "list":
			vals = c.LRange(ctx, k, 0, -1).Val()
		case "set":
			vals = c.SMembers(ctx, k).Val()
		case "zset":
			vals = c.ZRange(ctx, k, 0, -1).Val()
		case "none": // expired meanwhile
		default:
			t.Fatalf("redis key %q of type %s: not inspected", k, typ)
		}
		for _, v := range append(vals, k) {
			if strings.Contains(v, s) {
				found = append(found, fmt.Sprintf("%s: %.80q", k, v))
			}
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scanning redis: %v", err)
	}
	return strings.Join(found, "; ")
}

// A client's key never reaches the store verbatim: not in a held unknown
// outcome (the core's own answer, which echoes the key), nor in an upstream's
// answer that echoes the key header (as Stripe's API does). Every retry still
// carries its own key back.
func TestE2ENoRawKeyInTheStore(t *testing.T) {
	skipShort(t)
	rs := redistest.Start(t)

	reset := testutil.NewRawUpstream(t, "reset")
	p := start(t, "--upstream", "http://"+reset.Addr(), "--store", rs.URL())
	const held = "RAWKEY-held-7c41e"
	for i := range 2 {
		r := p.Post(t, "/charges", held, "x")
		if r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") || r.Replayed != (i > 0) || r.Header.Get("Idempotency-Key") != held {
			t.Fatalf("held unknown outcome, answer %d: %d replayed=%v key %q %s", i, r.Status, r.Replayed, r.Header.Get("Idempotency-Key"), r.Body)
		}
		if where := redisHolding(t, rs, held); where != "" {
			t.Fatalf("the raw key of a held unknown outcome is in the store: %s", where)
		}
	}

	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Idempotency-Key", r.Header.Get("Idempotency-Key"))
		w.Header().Set("X-Other", "kept")
		w.WriteHeader(201)
		fmt.Fprint(w, `{"id":"ch_1"}`)
	}))
	defer echo.Close()
	q := start(t, "--upstream", echo.URL, "--store", rs.URL())
	const echoed = "RAWKEY-echoed-93b0d"
	for i := range 2 {
		r := q.Post(t, "/charges", echoed, "x")
		if r.Status != 201 || r.Replayed != (i > 0) || r.Header.Get("Idempotency-Key") != echoed || r.Header.Get("X-Other") != "kept" {
			t.Fatalf("echoing upstream, answer %d: %d replayed=%v %v", i, r.Status, r.Replayed, r.Header)
		}
		if where := redisHolding(t, rs, echoed); where != "" {
			t.Fatalf("the raw key an upstream echoed is in the store: %s", where)
		}
	}
}

// Without a token, the admin and metrics listeners still refuse what a browser
// can send: a request with an Origin (a page's fetch or form), a Host that is
// not an IP literal or localhost (DNS rebinding: a page served from a name that
// now resolves to 127.0.0.1), and a POST that is not application/json (a form,
// or a text/plain "simple request"). A held key survives all of them; the
// IP-literal and localhost Hosts and `idemproxy keys` still work.
func TestE2EAdminRefusesBrowsers(t *testing.T) {
	skipShort(t)
	reset := testutil.NewRawUpstream(t, "reset")
	p := start(t, "--upstream", "http://"+reset.Addr(), "--metrics", "127.0.0.1:0")
	metricsAddr := p.Metrics
	if r := p.Post(t, "/charges", "adm1", "x"); r.Status != 502 {
		t.Fatalf("holding a key: %d %s", r.Status, r.Body)
	}
	_, port, _ := net.SplitHostPort(p.Admin)
	_, mport, _ := net.SplitHostPort(metricsAddr)
	const keys = "/keys/adm1?host=api.example"
	const html = `{"status":200,"headers":{"Content-Type":["text/html"]},"body":"<script>steal()</script>"}`
	for _, c := range []struct {
		name, method, addr, path, host, body string
		hdr                                  []string
		want                                 int
	}{
		{"Origin on GET /keys", "GET", p.Admin, keys, "", "", []string{"Origin", "http://evil.example"}, 403},
		{"Origin on a JSON release", "POST", p.Admin, "/release/adm1?host=api.example", "", "", []string{"Origin", "http://evil.example", "Content-Type", "application/json"}, 403},
		{"null Origin on /healthz", "GET", p.Admin, "/healthz", "", "", []string{"Origin", "null"}, 403},
		{"foreign Host on GET /keys", "GET", p.Admin, keys, "evil.example:" + port, "", nil, 403},
		{"rebinding Host on GET /keys", "GET", p.Admin, keys, "rebind.attacker.example", "", nil, 403},
		{"rebinding Host on pprof", "GET", p.Admin, "/debug/pprof/", "rebind.attacker.example:" + port, "", nil, 403},
		{"rebinding Host on /metrics", "GET", p.Admin, "/metrics", "a.b.example", "", nil, 403},
		{"text/plain resolve", "POST", p.Admin, "/resolve/adm1?host=api.example", "", html, []string{"Content-Type", "text/plain"}, 415},
		{"form resolve", "POST", p.Admin, "/resolve/adm1?host=api.example", "", "status=200", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"release without Content-Type", "POST", p.Admin, "/release/adm1?host=api.example", "", "", nil, 415},
		{"metrics listener: Origin", "GET", metricsAddr, "/metrics", "", "", []string{"Origin", "http://evil.example"}, 403},
		{"metrics listener: any Host (Prometheus scrapes by name; read-only counts)", "GET", metricsAddr, "/metrics", "idemproxy-1.internal:" + mport, "", nil, 200},
		{"IP-literal Host", "GET", p.Admin, keys, "", "", nil, 200},
		{"another IP-literal Host", "GET", p.Admin, keys, "10.1.2.3", "", nil, 200},
		{"IPv6-literal Host", "GET", p.Admin, keys, "[::1]:" + port, "", nil, 200},
		{"localhost Host", "GET", p.Admin, keys, "LocalHost:" + port, "", nil, 200},
		{"metrics listener: localhost", "GET", metricsAddr, "/metrics", "localhost", "", nil, 200},
	} {
		a := testutil.Send(t, c.addr, testutil.Request{Method: c.method, Target: c.path, Host: c.host, Body: c.body, Header: testutil.Headers(c.hdr...)})
		status, body := a.Status, a.Body
		if status != c.want || (c.want >= 400 && !strings.Contains(body, `"error"`)) {
			t.Errorf("%s: %d %.120s; want %d", c.name, status, body, c.want)
		}
	}
	// Nothing a browser sent settled the key.
	if r := p.Post(t, "/charges", "adm1", "x"); r.Status != 502 || !r.Replayed || !strings.Contains(r.Body, "outcome-unknown") {
		t.Errorf("the held key after the refused calls: %d replayed=%v %.100s; want it still held", r.Status, r.Replayed, r.Body)
	}
	reset.Act.Store("ok")
	if code, out := runBin(t, "keys", "release", "adm1", "--admin", p.Admin, "--host", "api.example"); code != 0 || !strings.Contains(out, `"released": true`) {
		t.Fatalf("idemproxy keys release: exit %d %s", code, out)
	}
	if r := p.Post(t, "/charges", "adm1", "x"); r.Status != 201 || r.Replayed {
		t.Fatalf("after keys release: %d %s", r.Status, r.Body)
	}
}

// admin_hosts admits the host names an operator reaches the admin port by
// (the check is on the name, any case, with or without port); other names are
// still refused. idemproxy keys sends its --admin host as the Host.
func TestE2EAdminHosts(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--admin-hosts", "admin.internal,Ops.Example")
	_, port, _ := net.SplitHostPort(p.Admin)
	for host, want := range map[string]int{
		"admin.internal:" + port: 200,
		"ADMIN.internal":         200,
		"ops.example:" + port:    200,
		"evil.example:" + port:   403,
		"internal:" + port:       403,
	} {
		if a := testutil.Send(t, p.Admin, testutil.Request{Method: "GET", Target: "/readyz", Host: host}); a.Status != want {
			t.Errorf("Host %s: %d %.100s; want %d", host, a.Status, a.Body, want)
		}
	}
	if code, out := runBin(t, "keys", "get", "nothing", "--admin", p.Admin); code != 1 || !strings.Contains(out, "not found") {
		t.Errorf("idemproxy keys get: exit %d %s; want 1, not found", code, out)
	}
}
