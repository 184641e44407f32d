package proxy

// `idemproxy validate`: the configuration checked as start-up checks it, the
// store left alone, before a deploy or a reload (as nginx -t, caddy validate).

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// validateMain loads the configuration from the same flags, variables and
// file as the server (ParseArgs), and builds what start-up builds from it
// (prepareState, buildRoutes: TLS files, forwarding, every route's settings,
// webhook secrets, reconcile rules), over a throwaway memory store instead of
// the configured one, which it neither opens nor reaches; it binds no port.
// Exit 0: it would start; 2: it would not, with the reason start-up gives
// (the flag, variable, or file, line and key at fault).
func validateMain(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := ParseArgs(args, getenv, stdout)
	if errors.Is(err, ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy validate:", Redact(err.Error()))
		return 2
	}
	if err := checkConfig(cfg); err != nil {
		fmt.Fprintln(stderr, "idemproxy validate:", Redact(err.Error()))
		return 2
	}
	where := "flags and variables"
	if cfg.file != "" {
		where = cfg.file
	}
	fmt.Fprintf(stdout, "idemproxy validate: %s: the configuration is valid (%d routes, store %s, not contacted)\n",
		where, len(cfg.Routes), stores.Redact(cfg.Store))
	return 0
}

// checkConfig builds cfg's state as start-up does, over a memory store.
func checkConfig(cfg *Config) error {
	p := &Proxy{log: slog.New(slog.DiscardHandler), metrics: newMetrics()}
	st, err := p.prepareState(cfg)
	if err != nil {
		return err
	}
	mem, err := memstore.New(memstore.WithMaxRecords(1))
	if err != nil {
		return err
	}
	defer mem.Close()
	st.cache = mem
	return p.buildRoutes(st)
}
