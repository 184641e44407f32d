package caddy_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/browsertest"
	"github.com/idemproxy/idemproxy/internal/console"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Caddy's admin API serves the operator console at /idempotency/ui/, the
// same page as idemproxy's admin listener, with its policy (script and style
// of its own only, no framing, no caching); the page calls the endpoints
// beside it (keys, handlers), relative to its address.
func TestCaddyServesTheConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	reset := testutil.NewRawUpstream(t, "reset") // reads the request, then resets: outcome unknown
	dir := t.TempDir()
	startCaddy(t, bin, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tname charges\n\t}\n\treverse_proxy %s\n}\n", reset.Addr()))
	client := adminClient(dir)
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	send := func(method, path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://localhost"+path, nil)
		for i := 0; i < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s on Caddy's admin endpoint: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	get := func(path string) (*http.Response, string) { t.Helper(); return send("GET", path) }
	for _, c := range []struct{ path, ctype, has string }{
		{"/idempotency/ui/", "text/html; charset=utf-8", `<script type="module" src="console.js">`},
		{"/idempotency/ui/console.js", "text/javascript; charset=utf-8", "new URL('../', location.href)"},
		{"/idempotency/ui/console.css", "text/css; charset=utf-8", "dialog"},
	} {
		resp, body := get(c.path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.ctype || !strings.Contains(body, c.has) {
			t.Errorf("GET %s: %d %s %.80q; want 200 %s with %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.ctype, c.has)
			continue
		}
		for k, v := range console.Headers {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("GET %s: %s %q, want %q", c.path, k, got, v)
			}
		}
	}
	if resp, _ := get("/idempotency/ui"); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/idempotency/ui/" {
		t.Errorf("GET /idempotency/ui: %d to %q; want a redirect to /idempotency/ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := get("/idempotency/ui/nothing.js"); resp.StatusCode != 404 {
		t.Errorf("GET /idempotency/ui/nothing.js: %d, want 404", resp.StatusCode)
	}
	// What the page calls, relative to /idempotency/ui/.
	for _, path := range []string{"/idempotency/keys?state=held&limit=100", "/idempotency/handlers"} {
		if resp, body := get(path); resp.StatusCode != 200 {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
}

// The console in a real browser under Caddy's admin API (headless Chromium;
// the admin endpoint a unix socket that the test forwards a loopback port
// to, that port its origin): the held key appears, is resolved from the
// page, and its next retry replays the resolution. Caddy's own browser rules
// apply, and they refuse a navigation without Origin or Referer (a typed
// address): the page opens from a link on a page of the endpoint's origin.
func TestCaddyConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	b := browsertest.Start(t)
	bin := caddyBinary(t)
	reset := testutil.NewRawUpstream(t, "reset")
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go forwardTo(ln, adminSocket(dir))
	global := fmt.Sprintf("{\n\tadmin unix/%s {\n\t\torigins %s\n\t}\n\tauto_https off\n\tpersist_config off\n}\n", adminSocket(dir), ln.Addr())
	p := startCaddy(t, bin, dir, global+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tname charges\n\t}\n\treverse_proxy %s\n}\n", reset.Addr()))
	if r := p.Post(t, "/charges", "k-console", "x"); r.Status != 502 {
		t.Fatalf("holding a key: %d %s", r.Status, r.Body)
	}
	// Caddy's admin endpoint refuses a browser's request that names no
	// origin of its own, in Origin or Referer: a typed address included.
	self := "http://" + ln.Addr().String()
	b.Navigate(self + "/idempotency/ui/")
	b.WaitFor(`document.body.textContent.includes('not allowed to access from origin')`, 10*time.Second)
	// Followed from a page of its origin, the page loads and its own calls
	// pass: their Origin (a POST), their Referer (a GET) are the endpoint's.
	b.NavigateFrom(self+"/idempotency/ui/", self+"/")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 1`, 10*time.Second)
	b.Eval(`document.querySelector('#held tbody tr td.actions').querySelectorAll('button')[1].click()`, nil)
	b.WaitFor(`!document.getElementById('resolve-form').hidden`, 10*time.Second)
	const answer = `{"charge":"settled"}`
	b.Eval(`(() => {
		document.getElementById('r-status').value = '201';
		document.getElementById('r-body').value = '`+answer+`';
		document.getElementById('resolve-form').requestSubmit();
	})()`, nil)
	b.WaitFor(`document.getElementById('confirm').open`, time.Second)
	b.Eval(`document.getElementById('confirm-ok').click()`, nil)
	b.WaitFor(`document.getElementById('status').textContent.startsWith('Resolved')`, 10*time.Second)
	if r := p.Post(t, "/charges", "k-console", "x"); r.Status != 201 || !r.Replayed || r.Body != answer {
		t.Fatalf("the retry after resolving from the console: %d replayed=%v %s; want 201 replayed %s", r.Status, r.Replayed, r.Body, answer)
	}
	if pr := b.Problems(); len(pr) != 0 {
		t.Errorf("problems on the page: %q", pr)
	}
}

// forwardTo copies each connection ln accepts to the unix socket sock and
// back, until ln is closed.
func forwardTo(ln net.Listener, sock string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("unix", sock)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { _, _ = io.Copy(u, c); u.(*net.UnixConn).CloseWrite() }()
			_, _ = io.Copy(c, u)
		}()
	}
}
