package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Main is the idemproxy command's server: it serves on the configuration args
// and the environment (getenv) give, until SIGINT or SIGTERM. It returns the
// exit code: 0 success, 1 runtime failure, 2 bad usage or configuration. The
// subcommands (keys, migrate, sign, validate, healthcheck, conformance) are the command's
// own (cmd/idemproxy).
func Main(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) > 0 {
		switch args[0] {
		case "version", "--version", "-version":
			fmt.Fprintln(stdout, "idemproxy", Version)
			return 0
		}
	}
	cfg, err := ParseArgs(args, getenv, stdout)
	if errors.Is(err, ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy:", Redact(err.Error()))
		return 2
	}
	log := NewLogger(cfg, stderr)
	redis.SetLogger(redisLogger{log}) // go-redis's own chatter, at debug level
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg, log); err != nil {
		fmt.Fprintln(stderr, "idemproxy:", Redact(err.Error()))
		return 1
	}
	return 0
}

// Run serves until ctx is done, then shuts down gracefully: it stops accepting,
// lets in-flight requests finish (their responses are stored) for up to
// ShutdownTimeout, and closes the store. On SIGHUP it builds the configuration
// again (the same flags and variables, the file as it is now) and swaps it in
// (Proxy.Reload); a configuration that does not load is logged and the
// running one kept.
func Run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if tracingWanted(os.Getenv) {
		stopTracing, err := startTracing(ctx)
		if err != nil {
			return err
		}
		cfg.tracing = true
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := stopTracing(sctx); err != nil {
				log.Warn("tracing: spans not all exported at shutdown", "error", err)
			}
		}()
		log.Info("tracing on: OpenTelemetry spans exported as the OTEL_* variables say")
	}
	lns, err := bind(cfg)
	if err != nil {
		return err
	}
	p, err := New(ctx, cfg, log)
	if err != nil {
		lns.close()
		return err
	}
	defer p.Close()
	p.listenAddr = lns.main.Addr().String()
	handler := http.Handler(p)
	if cfg.tracing {
		handler = p.traced()
	}
	servers := []*http.Server{newServer(handler, cfg, log)}
	servers[0].Protocols = clientProtocols(cfg.TLSCert != "") // h2c.go
	listeners := []net.Listener{lns.main}
	if cfg.TLSCert != "" {
		servers[0].TLSConfig = &tls.Config{GetCertificate: p.certificate, MinVersion: tls.VersionTLS12}
	}
	if lns.admin != nil {
		servers = append(servers, newServer(p.AdminHandler(), cfg, log))
		listeners = append(listeners, lns.admin)
		if cfg.AdminToken == "" && !loopback(lns.admin.Addr()) {
			log.Warn("the admin listener is reachable beyond this host and has no token: anyone who reaches it can read and delete keys; set IDEMPROXY_ADMIN_TOKEN",
				"admin", lns.admin.Addr().String())
		}
	}
	if lns.metrics != nil {
		servers = append(servers, newServer(p.MetricsHandler(), cfg, log))
		listeners = append(listeners, lns.metrics)
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			serve := func() error { return srv.Serve(listeners[i]) }
			if srv.TLSConfig != nil {
				// ServeTLS offers HTTP/2 (ALPN h2) beside HTTP/1.1; the
				// certificate comes from GetCertificate.
				serve = func() error { return srv.ServeTLS(listeners[i], "", "") }
			}
			if err := serve(); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	p.logStarted(lns)

	var serveErr error
	for serving := true; serving; {
		select {
		case <-ctx.Done():
			serving = false
		case serveErr = <-errc:
			log.Error("server failed", "error", serveErr)
			serving = false
		case <-hup:
			reload(ctx, p, cfg, log)
		}
	}
	timeout := p.cur.Load().cfg.ShutdownTimeout
	if serveErr == nil {
		log.Info("shutting down: draining in-flight requests", "timeout", timeout)
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("shutdown did not finish in time; some requests were cut off", "error", err)
		}
	}
	if err := p.Wait(sctx); err != nil {
		log.Warn("shutdown did not finish in time; some responses were not stored", "error", err)
	}
	log.Info("stopped")
	return serveErr
}

// reload answers a SIGHUP: the configuration built again from the flags and
// variables Run started with and the file as it is now, swapped in; or one line
// that says why not.
func reload(ctx context.Context, p *Proxy, started *Config, log *slog.Logger) {
	if started.reload == nil {
		log.Warn("SIGHUP: this configuration was not built from flags and a file; nothing to reload")
		return
	}
	log.Info("SIGHUP: reloading the configuration", "file", started.file)
	next, err := started.reload()
	if err == nil {
		err = p.Reload(ctx, next)
	}
	if err != nil {
		log.Error("configuration not reloaded; the running one is kept", "error", err)
	}
}

// loopback reports whether addr is a loopback address.
func loopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// newServer bounds how long a client may take to send its request headers
// (over TLS: its handshake) and keep an idle connection, and the size of the
// headers (over HTTP/2: the header list it advertises). The body a request
// buffers is bounded by the core's body_read_timeout and body_budget, over
// HTTP/1.1 and HTTP/2 alike; responses by handler_timeout.
// (http.Server.ReadTimeout would cancel a slow pass-through response's
// context when it fires.)
func newServer(h http.Handler, cfg *Config, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// redisLogger sends go-redis's internal log lines to slog at debug level; the
// errors that matter reach the caller as errors and are logged there.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
