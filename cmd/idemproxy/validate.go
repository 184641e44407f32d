package main

// `idemproxy validate`: the configuration checked as start-up checks it, the
// store left alone, before a deploy or a reload (as nginx -t, caddy validate).

import (
	"errors"
	"fmt"
	"io"

	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/proxy"
)

// validateMain loads the configuration from the same flags, variables and
// file as the server (proxy.ParseArgs), and builds what start-up builds from it
// (prepareState, buildRoutes: TLS files, forwarding, every route's settings,
// webhook secrets, reconcile rules), over a throwaway memory store instead of
// the configured one, which it neither opens nor reaches; it binds no port.
// Exit 0: it would start; 2: it would not, with the reason start-up gives
// (the flag, variable, or file, line and key at fault).
func validateMain(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := proxy.ParseArgs(args, getenv, stdout)
	if errors.Is(err, proxy.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy validate:", proxy.Redact(err.Error()))
		return 2
	}
	if err := proxy.Check(cfg); err != nil {
		fmt.Fprintln(stderr, "idemproxy validate:", proxy.Redact(err.Error()))
		return 2
	}
	where := "flags and variables"
	if cfg.File() != "" {
		where = cfg.File()
	}
	fmt.Fprintf(stdout, "idemproxy validate: %s: the configuration is valid (%d routes, store %s, not contacted)\n",
		where, len(cfg.Routes), stores.Redact(cfg.Store))
	return 0
}
