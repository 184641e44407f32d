package caddymodule

// The standard modules (reverse_proxy, header, encode, …) for adapt fixtures and
// handler tests, as in a real Caddy build.
import _ "github.com/caddyserver/caddy/v2/modules/standard"
