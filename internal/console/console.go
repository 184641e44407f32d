// Package console is the operator console: one page (HTML, a script and a
// style sheet, embedded, nothing loaded from elsewhere) that lists the held
// unknown outcomes, shows a key's record and settles it (release, resolve,
// delete) through the admin API it is served beside: idemproxy's admin
// listener serves it at /ui/, Caddy's admin API (admin.api.idempotency) at
// /idempotency/ui/. The page calls the endpoints relative to its own
// address, so one page serves both.
//
// The page itself holds nothing secret and is served without the admin
// token; its calls carry the token as "Authorization: Bearer", which the
// page asks the operator for and keeps in the tab's sessionStorage (never in
// a URL or a cookie: a browser sends neither on another site's behalf).
// SameOrigin and CrossSite are the browser rules the admin listener applies
// on top: the page's own calls pass, another site's are refused.
package console

import (
	"embed"
	"net/http"
	"path"
	"strings"
)

//go:embed page
var files embed.FS

// Headers are what every file of the page is served with: a policy under
// which the page runs only its own script and style, connects only to its
// own origin, and cannot be framed (clickjacking); no sniffing, no caching,
// no window or resource handle for another origin, and a Referer only to
// its own origin (Caddy's admin endpoint reads a GET's origin from it; the
// page's address holds nothing secret, and the page links nowhere else).
var Headers = map[string]string{
	"Content-Security-Policy":      "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
	"X-Frame-Options":              "DENY",
	"X-Content-Type-Options":       "nosniff",
	"Referrer-Policy":              "same-origin",
	"Cache-Control":                "no-store",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// Handler serves the page's files at prefix (which ends in "/", as "/ui/"),
// to GET and HEAD: prefix itself is the page, prefix without its slash
// redirects to it, and any other name is 404.
func Handler(prefix string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == strings.TrimSuffix(prefix, "/") {
			http.Redirect(w, r, prefix, http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, prefix)
		if name == "" {
			name = "index.html"
		}
		b, err := files.ReadFile("page/" + name)
		if err != nil || strings.Contains(name, "/") || types[path.Ext(name)] == "" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		for k, v := range Headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", types[path.Ext(name)])
		_, _ = w.Write(b)
	})
}

// Serve serves the page at prefix (see Handler) and passes every other
// request to next: mounted outside next's token check, since a browser
// navigating to the page cannot send the token; the page's calls send it.
func Serve(prefix string, next http.Handler) http.Handler {
	page := Handler(prefix)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, prefix) || r.URL.Path == strings.TrimSuffix(prefix, "/") {
			page.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// SameOrigin reports whether a request that carries an Origin header is a
// call of a page of the listener's own origin (the console's): one Origin,
// equal to the scheme and Host the request was sent with, and, when the
// browser says where the request comes from (Sec-Fetch-Site), same-origin.
// A browser sets Origin itself and no page can change it, so another site's
// page (another port of the same host included: another origin) fails this;
// so does "null" (a sandboxed frame, a file). The Host must pass the
// listener's own check as well: a name rebound to 127.0.0.1 is its own
// origin, which the Host check refuses.
func SameOrigin(r *http.Request) bool {
	origin := r.Header.Values("Origin")
	if len(origin) != 1 {
		return false
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	if r.Host == "" || !strings.EqualFold(origin[0], scheme+r.Host) {
		return false
	}
	site := r.Header.Values("Sec-Fetch-Site")
	return len(site) == 0 || (len(site) == 1 && site[0] == "same-origin")
}

// CrossSite reports whether a browser says a page of another origin made
// the request (Sec-Fetch-Site cross-site or same-site), unless it is a
// top-level navigation (a GET of a document: a link the operator follows to
// the page, which sends what typing the address would, and cannot be framed).
// It catches what carries no Origin: an image, a script or a frame another
// page loads from the listener. The admin tools never send Sec-Fetch-Site.
func CrossSite(r *http.Request) bool {
	site := r.Header.Values("Sec-Fetch-Site")
	if len(site) == 0 || (len(site) == 1 && (site[0] == "same-origin" || site[0] == "none")) {
		return false
	}
	navigation := (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
	return !navigation
}
