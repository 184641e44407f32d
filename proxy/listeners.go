package proxy

// The listeners Run binds, and the line that says where they are.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// listeners are the bound listeners of one Run: the clients', and the admin
// and metrics listeners when configured (nil otherwise).
type listeners struct {
	main, admin, metrics net.Listener
}

// bind binds every configured listener, before the store is opened, so that
// an address in use fails at once. A port of 0 binds a free one: the start-up
// line says which (logStarted).
func bind(cfg *Config) (*listeners, error) {
	var l listeners
	var err error
	if l.main, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.source("listen"), err)
	}
	if cfg.Admin != "" {
		if l.admin, err = net.Listen("tcp", cfg.Admin); err != nil {
			l.close()
			return nil, fmt.Errorf("%s: %w", cfg.source("admin"), err)
		}
	}
	if cfg.Metrics != "" {
		if l.metrics, err = net.Listen("tcp", cfg.Metrics); err != nil {
			l.close()
			return nil, fmt.Errorf("%s: %w", cfg.source("metrics"), err)
		}
	}
	return &l, nil
}

func (l *listeners) close() {
	for _, ln := range []net.Listener{l.main, l.admin, l.metrics} {
		if ln != nil {
			ln.Close()
		}
	}
}

// addr is ln's bound address, or "" for a listener that is off.
func addr(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// logStarted logs the notes on the configuration (a file key a variable or a
// flag overrides, a warning when the store is the memory store), then the
// start-up line: every listener as bound, the routes, the trusted proxies.
func (p *Proxy) logStarted(l *listeners) {
	st := p.cur.Load()
	cfg := st.cfg
	trusted := cfg.TrustedProxies
	if trusted == nil {
		trusted = []string{}
	}
	for _, o := range cfg.overrides {
		// A variable is easy to miss (a container image sets some): a
		// warning; a flag is on the command line: a note.
		level := slog.LevelWarn
		if strings.HasPrefix(o.by, "--") {
			level = slog.LevelInfo
		}
		p.log.Log(context.Background(), level, "a setting of the config file is overridden: the file's value is not used",
			"setting", o.setting, "by", o.by, "file", o.file)
	}
	if k := st.store.opened.Kind; k.Locator == "" { // a store in the process (cache.Driver.Locator)
		var shared []string
		for _, o := range stores.Drivers {
			if o.Locator != "" {
				shared = append(shared, o.Name)
			}
		}
		p.log.Warn("the " + k.Name + " store is this instance's own: records are not shared with other instances and are lost on restart; " +
			"to run more than one instance, or to keep records across restarts, use " + conf.OrList(shared) + " (store)")
	}
	// The start-up line last: who waits for it (a supervisor, a test) has
	// every note above in the log by then.
	p.log.Info("idemproxy listening", "addr", addr(l.main), "tls", cfg.TLSCert != "", "admin", addr(l.admin), "metrics", addr(l.metrics),
		"upstream", cfg.Upstream, "store", stores.Redact(cfg.Store), "routes", len(st.routes), "trusted_proxies", trusted, "version", Version)
}
