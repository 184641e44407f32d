// Command idemproxy is a reverse proxy that makes retried HTTP requests safe: put it
// in front of any API, and requests with an Idempotency-Key run once.
//
//	idemproxy --listen 127.0.0.1:8080 --upstream http://127.0.0.1:3000
//
// See idemproxy --help for every flag and its IDEMPROXY_* variable.
package main

import (
	"io"
	"os"

	"github.com/idemproxy/idemproxy/proxy"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// run is the command: a subcommand, or the proxy (proxy.Main). It returns the
// exit code: 0 success, 1 runtime failure, 2 bad usage or configuration.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) > 0 {
		switch args[0] {
		case "keys":
			return keysMain(args[1:], stdin, stdout, stderr, getenv)
		case "migrate":
			return migrateMain(args[1:], stdout, stderr, getenv)
		case "sign":
			return signMain(args[1:], stdin, stdout, stderr)
		case "validate":
			return validateMain(args[1:], stdout, stderr, getenv)
		case "healthcheck":
			return healthMain(args[1:], stdout, stderr, getenv)
		case "conformance":
			return conformanceMain(args[1:], stdout, stderr)
		}
	}
	return proxy.Main(args, stdout, stderr, getenv)
}
