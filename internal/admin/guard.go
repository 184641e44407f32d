package admin

// What keeps web pages out of the admin listener.

import (
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/idemproxy/idemproxy/internal/console"
)

// refuseBrowsers keeps web pages out of the admin listener, token
// or not. A page can make a browser send requests to a loopback port: a form
// POST or a text/plain fetch (no preflight) could release a held key or resolve
// it to HTML every retry then replays, and a page whose name it rebinds to
// 127.0.0.1 (DNS rebinding) could read /keys and pprof as same-origin. So:
//
//   - a request with an Origin header is refused (403) unless it is the
//     operator console's own call (console.SameOrigin: the Origin is this
//     listener's scheme and Host): browsers send it on cross-origin requests
//     and on every POST; the admin tools never do;
//   - so is one a browser says another site's page made (console.CrossSite:
//     Sec-Fetch-Site), but a navigation: an image or a script tag sends no
//     Origin;
//   - so is a Host that is not an IP address or localhost, or a name listed in
//     hosts (Access.Hosts: admin_hosts) (403): DNS rebinding needs a name the
//     attacker controls;
//   - a POST must be Content-Type: application/json (415): a browser sends
//     that cross-origin only after a CORS preflight, which is never granted.
//
// The token, when set, authenticates on top of this against whoever can reach
// the port; these rules stop browsers only.
func refuseBrowsers(hosts []string, next http.Handler) http.Handler {
	names := map[string]bool{}
	for _, h := range hosts {
		names[normalHost(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case len(r.Header["Origin"]) > 0 && !console.SameOrigin(r), console.CrossSite(r):
			writeJSON(w, http.StatusForbidden, adminError{Error: "a cross-origin request is refused: the admin API serves browsers its own console (/ui/) only"})
		case !hostAllowed(r.Host, names):
			writeJSON(w, http.StatusForbidden, adminError{Error: "the Host is refused: call the admin API by IP address or localhost, or list its host name in admin_hosts"})
		case r.Method == http.MethodPost && !isJSON(r.Header.Get("Content-Type")):
			writeJSON(w, http.StatusUnsupportedMediaType, adminError{Error: "a POST to the admin API must be Content-Type: application/json"})
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// hostAllowed reports whether a request's Host (with or without port) is an
// IP literal, localhost, or one of names (admin_hosts; any case, a trailing
// dot ignored).
func hostAllowed(hostport string, names map[string]bool) bool {
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
