package proxy_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/internal/browsertest"
	"github.com/idemproxy/idemproxy/internal/console"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

var consolePNG = flag.String("console-png", "", "write the operator console's screenshot to this file (docs/console.png)")

// The operator console in a real browser (headless Chromium, driven over
// the DevTools protocol): the page asks for the admin token, lists the held
// key, and resolves it with a body behind a confirmation; the key's next
// retry through the proxy replays the resolution. A cancelled confirmation
// settles nothing. What the records carry is shown as text: markup in a
// resolution's headers and body (and in a request's path, once records
// show it) creates no element and runs nothing. The token is in the tab's
// sessionStorage only: no cookie, not in the address.
func TestE2EConsoleInBrowser(t *testing.T) {
	skipShort(t)
	b := browsertest.Start(t)
	reset := testutil.NewRawUpstream(t, "reset") // reads the request, then resets: outcome unknown
	p := start(t, "--upstream", "http://"+reset.Addr(), "--admin-token", "s3cret")
	const xssPath = "/charges/%3Cscript%3Ewindow.pwned=4%3C/script%3E"
	for _, q := range []struct{ path, key string }{{"/charges", "console-1"}, {xssPath, "console-2"}} {
		if r := p.Post(t, q.path, q.key, `{"amount":100}`); r.Status != 502 {
			t.Fatalf("holding %s: %d %s", q.key, r.Status, r.Body)
		}
	}
	adminGet := func(target string) (int, string) {
		a := testutil.Send(t, p.Admin, testutil.Request{Method: "GET", Target: target, Header: testutil.Headers("Authorization", "Bearer s3cret")})
		return a.Status, a.Body
	}
	hashOf := func(key string) string {
		code, body := adminGet("/keys/" + key + "?host=" + testutil.LoadBalancedHost)
		var rec adminkeys.KeyRecord
		if code != 200 || json.Unmarshal([]byte(body), &rec) != nil {
			t.Fatalf("GET /keys/%s: %d %s", key, code, body)
		}
		return rec.KeyHash
	}
	h1, h2 := hashOf("console-1"), hashOf("console-2")

	b.Navigate("http://" + p.Admin + "/ui/")
	b.WaitFor(`document.getElementById('token-form').classList.contains('wanted')`, 10*time.Second)
	b.Eval(`document.getElementById('token').value = 's3cret'; document.getElementById('token-save').click()`, nil)
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 2`, 10*time.Second)
	row := func(hash string) string { return `document.querySelector('#held tbody tr[data-hash^="` + hash + `"]')` }
	b.WaitFor(row(h1)+` && `+row(h2), time.Second)

	// Filters: by hash, by state (neither has a reconcile job), by route.
	setFilter := func(id, value, event string) {
		b.Eval(`(() => { const e = document.getElementById('`+id+`'); e.value = `+jsString(value)+`; e.dispatchEvent(new Event('`+event+`')); })()`, nil)
	}
	setFilter("f-hash", h2[:12], "input")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 1 && `+row(h2), time.Second)
	setFilter("f-hash", "", "input")
	setFilter("f-state", "scheduled", "change")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 0 && !document.getElementById('held-empty').hidden`, time.Second)
	setFilter("f-state", "none", "change")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 2`, time.Second)
	setFilter("f-route", "/elsewhere", "input")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 0`, time.Second)
	setFilter("f-route", "", "input")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 2`, time.Second)

	// Whatever the listing carries is text; a path with markup (once
	// records carry their request) shows as written.
	_, listing := adminGet("/keys?state=held")
	if strings.Contains(listing, `"request"`) && strings.Contains(listing, "<script>") {
		b.WaitFor(`document.getElementById('held').textContent.includes('<script>window.pwned=4</script>')`, time.Second)
	}
	setFilter("f-state", "", "change")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 2`, time.Second)
	png := b.Screenshot()
	if !bytes.HasPrefix(png, []byte("\x89PNG")) || len(png) > 200<<10 {
		t.Errorf("screenshot: %d bytes, want a PNG under 200 KB", len(png))
	}
	if *consolePNG != "" {
		if err := os.WriteFile(*consolePNG, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A release cancelled at its confirmation settles nothing.
	b.Eval(row(h2)+`.querySelector('td.actions button').click()`, nil)
	b.WaitFor(`document.getElementById('confirm').open && document.getElementById('confirm-title').textContent.startsWith('Release')`, time.Second)
	b.Eval(`document.getElementById('confirm-cancel').click()`, nil)
	b.WaitFor(`!document.getElementById('confirm').open`, time.Second)
	if code, _ := adminGet("/keys?hash=" + h2); code != 200 {
		t.Fatalf("after a cancelled release: GET /keys?hash=%s answered %d; want the record still there", h2, code)
	}

	// Resolve console-1 from its key view.
	b.Eval(row(h1)+`.querySelectorAll('td.actions button')[1].click()`, nil)
	b.WaitFor(`!document.getElementById('key-view').hidden && !document.getElementById('resolve-form').hidden && document.getElementById('kv-record').textContent.includes('unknown_outcome')`, 10*time.Second)
	if !strings.Contains(evalString(t, b, `location.hash`), h1) {
		t.Errorf("the key view's address does not name the key")
	}
	const note = `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`
	const answer = `{"charge":"settled","note":"<script>window.pwned=3</script>"}`
	b.Eval(`(() => {
		document.getElementById('r-status').value = '201';
		document.getElementById('r-headers').value = 'Content-Type: application/json\nX-Note: ' + `+jsString(note)+`;
		document.getElementById('r-body').value = `+jsString(answer)+`;
		document.getElementById('resolve-form').requestSubmit();
	})()`, nil)
	b.WaitFor(`document.getElementById('confirm').open && document.getElementById('confirm-detail').textContent.includes('201')`, time.Second)
	if code, _ := adminGet("/keys?hash=" + h1); code != 200 {
		t.Fatalf("before the confirmation: GET /keys?hash=%s answered %d", h1, code)
	}
	if r := p.Post(t, "/charges", "console-1", `{"amount":100}`); r.Status != 502 || !r.Replayed {
		t.Fatalf("the retry before the confirmation: %d replayed=%v %s; want it still held", r.Status, r.Replayed, r.Body)
	}
	b.Eval(`document.getElementById('confirm-ok').click()`, nil)
	b.WaitFor(`document.getElementById('status').textContent.startsWith('Resolved')`, 10*time.Second)
	b.WaitFor(`document.getElementById('resolve-form').hidden && document.getElementById('kv-record').textContent.includes('201')`, 10*time.Second)

	// The markup it shows is text: no element, nothing ran.
	var seen struct {
		Elements int  `json:"elements"`
		Pwned    bool `json:"pwned"`
		Note     bool `json:"note"`
		Body     bool `json:"body"`
		Cookie   string
		Stored   string
		Address  string
	}
	b.Eval(`({elements: document.querySelectorAll('main script, main img, main iframe, dialog script, dialog img').length,
		pwned: window.pwned !== undefined,
		note: document.getElementById('kv-record').textContent.includes(`+jsString(note)+`),
		body: document.getElementById('kv-record').textContent.includes(`+jsString(answer)+`),
		Cookie: document.cookie, Stored: sessionStorage.getItem('idemproxy-admin-token'), Address: location.href})`, &seen)
	if seen.Elements != 0 || seen.Pwned || !seen.Note || !seen.Body {
		t.Errorf("the record's markup: %d elements made, ran=%v, shown as text: header %v, body %v; want none, false, true, true", seen.Elements, seen.Pwned, seen.Note, seen.Body)
	}
	if seen.Cookie != "" || seen.Stored != "s3cret" || strings.Contains(seen.Address, "s3cret") {
		t.Errorf("the token: cookie %q, sessionStorage %q, address %q; want it in sessionStorage only", seen.Cookie, seen.Stored, seen.Address)
	}

	// The retry replays the resolution; the upstream is not called again.
	runs := reset.Count.Load()
	r := p.Post(t, "/charges", "console-1", `{"amount":100}`)
	if r.Status != 201 || !r.Replayed || r.Body != answer || r.Header.Get("X-Note") != note {
		t.Fatalf("the retry after resolving from the console: %d replayed=%v %s %v; want 201 replayed %s", r.Status, r.Replayed, r.Body, r.Header, answer)
	}
	if n := reset.Count.Load(); n != runs {
		t.Errorf("the upstream was called %d more times; want none", n-runs)
	}

	// Back to the list: the resolved key has left it. Looked up by its
	// hash, it shows as the completed record it now is.
	b.Eval(`document.getElementById('back').click()`, nil)
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 1 && `+row(h2), 10*time.Second)
	setFilter("f-hash", h1, "input")
	b.Eval(`document.getElementById('lookup').click()`, nil)
	b.WaitFor(`!document.getElementById('key-view').hidden && document.getElementById('kv-record').dataset.state === 'completed' && document.getElementById('resolve-form').hidden`, 10*time.Second)

	// Release console-2 from the list, confirmed: its next retry runs (and
	// is held again: the upstream resets).
	b.Eval(`document.getElementById('back').click()`, nil)
	setFilter("f-hash", "", "input")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 1`, 10*time.Second)
	b.Eval(row(h2)+`.querySelector('td.actions button').click()`, nil)
	b.WaitFor(`document.getElementById('confirm').open`, time.Second)
	b.Eval(`document.getElementById('confirm-ok').click()`, nil)
	b.WaitFor(`document.getElementById('status').textContent.startsWith('Released')`, 10*time.Second)
	runs = reset.Count.Load()
	if r := p.Post(t, xssPath, "console-2", `{"amount":100}`); r.Status != 502 || r.Replayed || reset.Count.Load() != runs+1 {
		t.Fatalf("the retry after releasing from the console: %d replayed=%v; want it run again", r.Status, r.Replayed)
	}
	// Delete it from its key view, confirmed: the record is gone.
	b.Eval(`document.getElementById('refresh').click()`, nil)
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 1`, 10*time.Second)
	b.Eval(row(h2)+`.querySelector('a.hash').click()`, nil)
	b.WaitFor(`!document.getElementById('key-view').hidden && !document.getElementById('kv-delete').hidden && document.getElementById('kv-record').textContent.includes('unknown_outcome')`, 10*time.Second)
	b.Eval(`document.getElementById('kv-delete').click()`, nil)
	b.WaitFor(`document.getElementById('confirm').open && document.getElementById('confirm-title').textContent.startsWith('Delete')`, time.Second)
	b.Eval(`document.getElementById('confirm-ok').click()`, nil)
	b.WaitFor(`document.getElementById('status').textContent.startsWith('Deleted') && !document.getElementById('list-view').hidden`, 10*time.Second)
	if code, _ := adminGet("/keys?hash=" + h2); code != 404 {
		t.Errorf("after deleting from the console: GET /keys?hash=%s answered %d; want 404", h2, code)
	}
	if pr := b.Problems(); len(pr) != 0 {
		t.Errorf("problems on the page: %q", pr)
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func evalString(t *testing.T, b *browsertest.Browser, js string) string {
	t.Helper()
	var s string
	b.Eval(js, &s)
	return s
}

// The admin listener's browser rules with the console: the page is served
// without the token (its calls send it) with its policy; its own calls (an
// Origin that is the listener's own) pass, and what another page can make a
// browser send is refused as before: another Origin, the right Origin on a
// rebound name, a same-origin Origin the browser says came from another
// site, a form, an image or a frame of another site. A link from another
// site opens the page.
func TestE2EConsoleBrowserRules(t *testing.T) {
	skipShort(t)
	reset := testutil.NewRawUpstream(t, "reset")
	p := start(t, "--upstream", "http://"+reset.Addr(), "--admin-token", "s3cret")
	if r := p.Post(t, "/charges", "rules-1", "x"); r.Status != 502 {
		t.Fatalf("holding a key: %d %s", r.Status, r.Body)
	}
	_, port, _ := net.SplitHostPort(p.Admin)
	self := "http://" + p.Admin
	const rebound = "rebind.attacker.example"
	release := "/release/rules-1?host=" + testutil.LoadBalancedHost
	tok := []string{"Authorization", "Bearer s3cret"}
	with := func(pairs ...string) []string { return append(append([]string{}, tok...), pairs...) }
	for _, c := range []struct {
		name, method, path, host, body string
		hdr                            []string
		want                           int
	}{
		{"the page, no token", "GET", "/ui/", "", "", nil, 200},
		{"its script, no token", "GET", "/ui/console.js", "", "", nil, 200},
		{"the API, no token", "GET", "/keys?state=held", "", "", nil, 401},
		{"the page's GET", "GET", "/keys?state=held", "", "", with("Origin", self, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"), 200},
		{"a link from another site to the page", "GET", "/ui/", "", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}, 200},
		{"another site's Origin", "POST", release, "", "{}", with("Origin", "http://evil.example", "Content-Type", "application/json"), 403},
		{"another port's Origin", "POST", release, "", "{}", with("Origin", "http://127.0.0.1:1", "Content-Type", "application/json"), 403},
		{"the listener's Origin, the browser says cross-site", "POST", release, "", "{}", with("Origin", self, "Sec-Fetch-Site", "cross-site", "Content-Type", "application/json"), 403},
		{"a rebound name's own Origin", "POST", release, rebound + ":" + port, "{}", with("Origin", "http://"+rebound+":"+port, "Content-Type", "application/json"), 403},
		{"a rebound name's page", "GET", "/ui/", rebound + ":" + port, "", nil, 403},
		{"a same-origin form", "POST", release, "", "a=b", with("Origin", self, "Content-Type", "application/x-www-form-urlencoded"), 415},
		{"another site's form", "POST", release, "", "a=b", with("Origin", "http://evil.example", "Content-Type", "application/x-www-form-urlencoded"), 403},
		{"another site's image", "GET", "/keys?state=held", "", "", with("Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"), 403},
		{"another site's frame of the page", "GET", "/ui/", "", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "iframe"}, 403},
		{"the page's POST", "POST", release, "", "", with("Origin", self, "Sec-Fetch-Site", "same-origin", "Content-Type", "application/json"), 200},
	} {
		a := testutil.Send(t, p.Admin, testutil.Request{Method: c.method, Target: c.path, Host: c.host, Body: c.body, Header: testutil.Headers(c.hdr...)})
		if a.Status != c.want {
			t.Errorf("%s: %d %.160s; want %d", c.name, a.Status, a.Body, c.want)
			continue
		}
		if strings.HasPrefix(c.path, "/ui/") && c.want == 200 {
			for k, v := range console.Headers {
				if got := a.Header.Get(k); got != v {
					t.Errorf("%s: %s %q, want %q", c.name, k, got, v)
				}
			}
		}
	}
	// Only the page's own POST settled the key: its retry runs again.
	if r := p.Post(t, "/charges", "rules-1", "x"); r.Replayed {
		t.Errorf("after the page's release: %d replayed=%v; want it run again", r.Status, r.Replayed)
	}
}

// Another site's page in the operator's browser, against an admin listener
// without a token (so only the browser rules stand in its way), tries what
// a page can: a no-cors text/plain fetch that would release a held key, a
// JSON fetch (preflighted), an image and a frame of the listener, and a
// text/plain form that would resolve the key to its own answer. The key is
// still held after all of them; the console opened by a link works.
func TestE2EConsoleAnotherSiteInBrowser(t *testing.T) {
	skipShort(t)
	b := browsertest.Start(t)
	reset := testutil.NewRawUpstream(t, "reset")
	p := start(t, "--upstream", "http://"+reset.Addr())
	if r := p.Post(t, "/charges", "site-1", "x"); r.Status != 502 {
		t.Fatalf("holding a key: %d %s", r.Status, r.Body)
	}
	listing := testutil.Send(t, p.Admin, testutil.Request{Method: "GET", Target: "/keys?state=held"}).Body
	var page adminkeys.HeldPage
	if json.Unmarshal([]byte(listing), &page) != nil || len(page.Held) != 1 {
		t.Fatalf("the held list: %s", listing)
	}
	_, port, _ := net.SplitHostPort(p.Admin)
	admin := "http://localhost:" + port // another site than the attacker's 127.0.0.1
	hash := page.Held[0].Hash
	attack := `<!doctype html><body><form id="f" method="POST" enctype="text/plain" action="` + admin + `/resolve?hash=` + hash + `">` +
		`<input name='{"status":200,"body":"attacker","x":"' value='"}'></form><script>
window.tried = (async () => {
  const out = [];
  try { await fetch('` + admin + `/release?hash=` + hash + `', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body: '{}'}); out.push('no-cors sent'); } catch (e) { out.push('no-cors: ' + e); }
  try { await fetch('` + admin + `/release?hash=` + hash + `', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'}); out.push('json read'); } catch (e) { out.push('json refused'); }
  await new Promise((done) => { const i = new Image(); i.onload = i.onerror = done; i.src = '` + admin + `/keys?state=held'; });
  await new Promise((done) => { const f = document.createElement('iframe'); f.onload = done; f.src = '` + admin + `/ui/'; document.body.append(f); setTimeout(done, 2000); });
  return out;
})();
</script></body>`
	site := testutil.NewUpstream(t, testutil.Reply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, attack)
	}))
	b.Navigate(site.URL + "/")
	var tried []string
	b.Eval(`window.tried`, &tried)
	if strings.Contains(strings.Join(tried, ","), "json read") {
		t.Errorf("another site read the admin API's answer to a JSON fetch: %q", tried)
	}
	b.Eval(`document.getElementById('f').submit()`, nil)
	b.WaitFor(`location.href.startsWith('`+admin+`')`, 10*time.Second)
	if r := p.Post(t, "/charges", "site-1", "x"); r.Status != 502 || !r.Replayed {
		t.Fatalf("after another site's page tried: %d replayed=%v %s; want the key still held", r.Status, r.Replayed, r.Body)
	}
	// A link from that site opens the console, which works (no token set).
	b.NavigateFrom(admin+"/ui/", site.URL+"/")
	b.WaitFor(`document.querySelectorAll('#held tbody tr').length === 1`, 10*time.Second)
}
