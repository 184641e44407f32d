package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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
