// Command idemproxy is a reverse proxy that makes retried HTTP requests safe: put it
// in front of any API, and requests with an Idempotency-Key run once.
//
//	idemproxy --listen 127.0.0.1:8080 --upstream http://127.0.0.1:3000
//
// See idemproxy --help for every flag and its IDEMPROXY_* variable.
package main

import (
	"os"

	"github.com/idemproxy/idemproxy/proxy"
)

func main() {
	os.Exit(proxy.Main(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}
