// Command caddy is Caddy with the standard modules plus the idempotency handler:
// a custom build made with plain `go build` (what `xcaddy build --with
// github.com/idemproxy/idemproxy/caddymodule` produces).
//
//	make caddy
//	bin/caddy run --config examples/caddy/Caddyfile
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/idemproxy/idemproxy/caddymodule"
)

func main() {
	caddycmd.Main()
}
