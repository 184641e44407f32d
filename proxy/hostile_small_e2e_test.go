package proxy_test

import (
	"bufio"
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

// rawExchange sends one request, written out byte for byte, on a new connection
// and returns the answer's status, headers and whatever body follows (for a 101,
// the bytes of the switched connection until it closes).
func rawExchange(t *testing.T, addr, request string) (int, http.Header, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

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
				status, hdr, _ := rawExchange(t, p.addr, req)
				if status == 409 && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond) // the first still holds its switched connection
					continue
				}
				got = append(got, fmt.Sprint(status, " ", hdr.Get("Idempotency-Problem")))
				break
			}
		}
		want := "400 urn:idemproxy:problem:upgrade-refused"
		if n := up.Count.Load() - before; n != 0 || got[0] != want || got[1] != want {
			t.Fatalf("%s: answered %q, the upstream executed it %d times; want %q twice and no execution", c.name, got, n, want)
		}
	}
	// Without a key nothing is promised: the upgrade passes through as before.
	status, _, _ := rawExchange(t, p.addr, "POST /ws HTTP/1.1\r\nHost: api.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 1\r\n\r\nx")
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
	up := newUpstream(t)
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
		first := send(t, p.addr, "/pay", key, "same body", "Cookie", c.a)
		second := send(t, p.addr, "/pay", key, "same body", "Cookie", c.b)
		if first.status != 201 || second.status != 201 || second.replayed || up.count(key) != 2 {
			t.Errorf("%s: the second session got %d replayed=%v %q (upstream ran %d); want its own execution, not the first session's answer",
				c.name, second.status, second.replayed, second.body, up.count(key))
		}
		// Each session's own retry is still replayed.
		if again := send(t, p.addr, "/pay", key, "same body", "Cookie", c.a); !again.replayed || again.body != first.body {
			t.Errorf("%s: the first session's retry: replayed=%v %q, want its own answer %q", c.name, again.replayed, again.body, first.body)
		}
	}
}

// The template error format fills each placeholder of the template once: text
// that came from a value is never rescanned, so a detail naming "{code}" (here
// the JSON pointer of the key source, which the missing-key detail quotes)
// comes back verbatim.
func TestE2ETemplateFormatDoesNotRefillValues(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--require-key", "--key-source", "json:/{code}",
		"--error-format", `{"error":{"code":"{code}","message":"{detail}"}}`)
	r := send(t, p.addr, "/pay", "", `{"other":1}`, "Content-Type", "application/json")
	var got struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal([]byte(r.body), &got)
	if r.status != 400 || got.Error.Code != "missing_key" || !strings.Contains(got.Error.Message, "/{code}") {
		t.Fatalf("missing key in the template format: %d %s; want the detail naming /{code} verbatim", r.status, r.body)
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
		r := send(t, p.addr, "/charges", held, "x")
		if r.status != 502 || !strings.Contains(r.body, "outcome-unknown") || r.replayed != (i > 0) || r.header.Get("Idempotency-Key") != held {
			t.Fatalf("held unknown outcome, answer %d: %d replayed=%v key %q %s", i, r.status, r.replayed, r.header.Get("Idempotency-Key"), r.body)
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
		r := send(t, q.addr, "/charges", echoed, "x")
		if r.status != 201 || r.replayed != (i > 0) || r.header.Get("Idempotency-Key") != echoed || r.header.Get("X-Other") != "kept" {
			t.Fatalf("echoing upstream, answer %d: %d replayed=%v %v", i, r.status, r.replayed, r.header)
		}
		if where := redisHolding(t, rs, echoed); where != "" {
			t.Fatalf("the raw key an upstream echoed is in the store: %s", where)
		}
	}
}

// adminCall makes one request to an admin or metrics listener with the Host,
// extra headers and body given, and returns the status and body.
func adminCall(t *testing.T, method, addr, path, host, body string, hdr ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
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
	metricsAddr := testutil.FreeAddr(t)
	p := start(t, "--upstream", "http://"+reset.Addr(), "--metrics", metricsAddr)
	if r := send(t, p.addr, "/charges", "adm1", "x"); r.status != 502 {
		t.Fatalf("holding a key: %d %s", r.status, r.body)
	}
	_, port, _ := net.SplitHostPort(p.admin)
	_, mport, _ := net.SplitHostPort(metricsAddr)
	const keys = "/keys/adm1?host=api.example"
	const html = `{"status":200,"headers":{"Content-Type":["text/html"]},"body":"<script>steal()</script>"}`
	for _, c := range []struct {
		name, method, addr, path, host, body string
		hdr                                  []string
		want                                 int
	}{
		{"Origin on GET /keys", "GET", p.admin, keys, "", "", []string{"Origin", "http://evil.example"}, 403},
		{"Origin on a JSON release", "POST", p.admin, "/release/adm1?host=api.example", "", "", []string{"Origin", "http://evil.example", "Content-Type", "application/json"}, 403},
		{"null Origin on /healthz", "GET", p.admin, "/healthz", "", "", []string{"Origin", "null"}, 403},
		{"foreign Host on GET /keys", "GET", p.admin, keys, "evil.example:" + port, "", nil, 403},
		{"rebinding Host on GET /keys", "GET", p.admin, keys, "rebind.attacker.example", "", nil, 403},
		{"rebinding Host on pprof", "GET", p.admin, "/debug/pprof/", "rebind.attacker.example:" + port, "", nil, 403},
		{"rebinding Host on /metrics", "GET", p.admin, "/metrics", "a.b.example", "", nil, 403},
		{"text/plain resolve", "POST", p.admin, "/resolve/adm1?host=api.example", "", html, []string{"Content-Type", "text/plain"}, 415},
		{"form resolve", "POST", p.admin, "/resolve/adm1?host=api.example", "", "status=200", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"release without Content-Type", "POST", p.admin, "/release/adm1?host=api.example", "", "", nil, 415},
		{"metrics listener: Origin", "GET", metricsAddr, "/metrics", "", "", []string{"Origin", "http://evil.example"}, 403},
		{"metrics listener: any Host (Prometheus scrapes by name; read-only counts)", "GET", metricsAddr, "/metrics", "idemproxy-1.internal:" + mport, "", nil, 200},
		{"IP-literal Host", "GET", p.admin, keys, "", "", nil, 200},
		{"another IP-literal Host", "GET", p.admin, keys, "10.1.2.3", "", nil, 200},
		{"IPv6-literal Host", "GET", p.admin, keys, "[::1]:" + port, "", nil, 200},
		{"localhost Host", "GET", p.admin, keys, "LocalHost:" + port, "", nil, 200},
		{"metrics listener: localhost", "GET", metricsAddr, "/metrics", "localhost", "", nil, 200},
	} {
		status, body := adminCall(t, c.method, c.addr, c.path, c.host, c.body, c.hdr...)
		if status != c.want || (c.want >= 400 && !strings.Contains(body, `"error"`)) {
			t.Errorf("%s: %d %.120s; want %d", c.name, status, body, c.want)
		}
	}
	// Nothing a browser sent settled the key.
	if r := send(t, p.addr, "/charges", "adm1", "x"); r.status != 502 || !r.replayed || !strings.Contains(r.body, "outcome-unknown") {
		t.Errorf("the held key after the refused calls: %d replayed=%v %.100s; want it still held", r.status, r.replayed, r.body)
	}
	reset.Act.Store("ok")
	if code, out := runBin(t, "keys", "release", "adm1", "--admin", p.admin, "--host", "api.example"); code != 0 || !strings.Contains(out, `"released": true`) {
		t.Fatalf("idemproxy keys release: exit %d %s", code, out)
	}
	if r := send(t, p.addr, "/charges", "adm1", "x"); r.status != 201 || r.replayed {
		t.Fatalf("after keys release: %d %s", r.status, r.body)
	}
}

// admin_hosts admits the host names an operator reaches the admin port by
// (the check is on the name, any case, with or without port); other names are
// still refused. idemproxy keys sends its --admin host as the Host.
func TestE2EAdminHosts(t *testing.T) {
	skipShort(t)
	up := newUpstream(t)
	p := start(t, "--upstream", up.URL, "--admin-hosts", "admin.internal,Ops.Example")
	_, port, _ := net.SplitHostPort(p.admin)
	for host, want := range map[string]int{
		"admin.internal:" + port: 200,
		"ADMIN.internal":         200,
		"ops.example:" + port:    200,
		"evil.example:" + port:   403,
		"internal:" + port:       403,
	} {
		if status, body := adminCall(t, "GET", p.admin, "/readyz", host, ""); status != want {
			t.Errorf("Host %s: %d %.100s; want %d", host, status, body, want)
		}
	}
	if code, out := runBin(t, "keys", "get", "nothing", "--admin", p.admin); code != 1 || !strings.Contains(out, "not found") {
		t.Errorf("idemproxy keys get: exit %d %s; want 1, not found", code, out)
	}
}
