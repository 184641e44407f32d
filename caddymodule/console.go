package caddymodule

// The operator console under Caddy's admin API. The browser rules are
// Caddy's admin endpoint's own: the Host checked against its origins (DNS
// rebinding); a request with an Origin, or with Sec-Fetch-Mode (any fetch
// a browser makes), refused unless its Origin (or Referer) is one of them;
// no-cors refused.

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemproxy/idemproxy/internal/console"
)

// consoleRoute serves the operator console (package console) at
// /idempotency/ui/: the page idemproxy's admin listener serves at /ui/,
// calling the endpoints beside it.
func consoleRoute() caddy.AdminRoute {
	page := console.Handler("/idempotency/ui/")
	return caddy.AdminRoute{Pattern: "/idempotency/ui/", Handler: caddy.AdminHandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		page.ServeHTTP(w, r)
		return nil
	})}
}
