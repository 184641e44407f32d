package console

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// The page and its files are served to GET with the policy that keeps it
// from running anything but its own script, from being framed and from
// being cached; other names are 404, other methods 405, and every other
// path goes to the API behind.
func TestServe(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := Serve("/ui/", api)
	for _, c := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/ui/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/ui/", 200, "text/html; charset=utf-8"},
		{"GET", "/ui/console.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/ui/console.css", 200, "text/css; charset=utf-8"},
		{"GET", "/ui/icon.svg", 404, ""},
		{"GET", "/ui", 301, ""},
		{"GET", "/ui/nope.js", 404, ""},
		{"GET", "/ui/../console.go", 404, ""},
		{"POST", "/ui/", 405, ""},
		{"GET", "/keys", 418, ""},
		{"GET", "/uix", 418, ""},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
		if w.Code != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, w.Code, c.status)
			continue
		}
		if c.status != 200 {
			continue
		}
		if got := w.Header().Get("Content-Type"); got != c.ctype {
			t.Errorf("%s %s: Content-Type %q, want %q", c.method, c.path, got, c.ctype)
		}
		for k, v := range Headers {
			if got := w.Header().Get(k); got != v {
				t.Errorf("%s %s: %s %q, want %q", c.method, c.path, k, got, v)
			}
		}
	}
	w := httptest.NewRecorder()
	Handler("/idempotency/ui/").ServeHTTP(w, httptest.NewRequest("GET", "/idempotency/ui", nil))
	if loc := w.Header().Get("Location"); w.Code != 301 || loc != "/idempotency/ui/" {
		t.Errorf("/idempotency/ui: %d to %q, want 301 to /idempotency/ui/", w.Code, loc)
	}
	csp := Headers["Content-Security-Policy"]
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("the policy lacks %s: %s", want, csp)
		}
	}
}

// The page loads nothing from elsewhere and has no inline script or style
// (the policy would block them); the script never writes HTML: every field
// of a record is set as text.
func TestPageIsSelfContained(t *testing.T) {
	html, _ := files.ReadFile("page/index.html")
	js, _ := files.ReadFile("page/console.js")
	css, _ := files.ReadFile("page/console.css")
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).Find(html); m != nil {
		t.Errorf("index.html loads from elsewhere: %s", m)
	}
	if m := regexp.MustCompile(`(?i)<script>|<style|\son[a-z]+=|style="`).Find(html); m != nil {
		t.Errorf("index.html has inline script or style: %s", m)
	}
	if m := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function|setAttribute\(.on`).Find(js); m != nil {
		t.Errorf("console.js writes HTML or code: %s", m)
	}
	if m := regexp.MustCompile(`(?i)url\(|@import`).Find(css); m != nil {
		t.Errorf("console.css loads from elsewhere: %s", m)
	}
}

// SameOrigin admits the page's own calls (Origin is the listener's scheme
// and Host) and nothing else; CrossSite refuses what another page makes a
// browser load, but a navigation.
func TestBrowserRules(t *testing.T) {
	req := func(method, host string, tlsOn bool, hdr ...string) *http.Request {
		r := httptest.NewRequest(method, "/keys", nil)
		r.Host = host
		if tlsOn {
			r.TLS = &tls.ConnectionState{}
		}
		for i := 0; i < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return r
	}
	for _, c := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"the page's POST", req("POST", "127.0.0.1:9090", false, "Origin", "http://127.0.0.1:9090", "Sec-Fetch-Site", "same-origin"), true},
		{"the page's POST, no Sec-Fetch-Site", req("POST", "localhost:9090", false, "Origin", "http://LocalHost:9090"), true},
		{"over TLS", req("POST", "[::1]:9443", true, "Origin", "https://[::1]:9443"), true},
		{"another site", req("POST", "127.0.0.1:9090", false, "Origin", "http://evil.example"), false},
		{"another port of the host", req("POST", "127.0.0.1:9090", false, "Origin", "http://127.0.0.1:8080"), false},
		{"the scheme differs", req("POST", "127.0.0.1:9090", false, "Origin", "https://127.0.0.1:9090"), false},
		{"null", req("POST", "127.0.0.1:9090", false, "Origin", "null"), false},
		{"two Origins", req("POST", "127.0.0.1:9090", false, "Origin", "http://127.0.0.1:9090", "Origin", "http://evil.example"), false},
		{"Origin matches, the browser says cross-site", req("POST", "127.0.0.1:9090", false, "Origin", "http://127.0.0.1:9090", "Sec-Fetch-Site", "cross-site"), false},
		{"no Origin", req("POST", "127.0.0.1:9090", false), false},
	} {
		if got := SameOrigin(c.r); got != c.want {
			t.Errorf("SameOrigin, %s: %v, want %v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"the admin tools", req("GET", "127.0.0.1:9090", false), false},
		{"the page's own", req("GET", "127.0.0.1:9090", false, "Sec-Fetch-Site", "same-origin"), false},
		{"typed in the address bar", req("GET", "127.0.0.1:9090", false, "Sec-Fetch-Site", "none"), false},
		{"an image of another site", req("GET", "127.0.0.1:9090", false, "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"), true},
		{"a script of another port", req("GET", "127.0.0.1:9090", false, "Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "script"), true},
		{"a frame of another site", req("GET", "127.0.0.1:9090", false, "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "iframe"), true},
		{"a form of another site", req("POST", "127.0.0.1:9090", false, "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"), true},
		{"a link from another site", req("GET", "127.0.0.1:9090", false, "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"), false},
	} {
		if got := CrossSite(c.r); got != c.want {
			t.Errorf("CrossSite, %s: %v, want %v", c.name, got, c.want)
		}
	}
}
