// Command service is a Go HTTP service whose requests the idempotency middleware tracks
// directly, with the in-memory store: no proxy in between. SIGTERM or Ctrl-C
// drains it: requests in flight finish and their responses are stored.
//
//	go run ./examples/service --listen 127.0.0.1:8081
//	curl -i -X POST localhost:8081/orders -H 'Idempotency-Key: o-1' -d '{"sku":"x"}'
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to listen on")
	shutdownTimeout := flag.Duration("shutdown-timeout", 30*time.Second, "how long SIGTERM waits for requests in flight and background store writes")
	flag.Parse()

	store, err := memstore.New(memstore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer store.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	idem, err := middleware.New(store,
		func(s *middleware.Settings) { s.RequireKey = true },
		func(s *middleware.Settings) { s.TTL = time.Hour },
		func(s *middleware.Settings) { s.Logger = logger },
		func(s *middleware.Settings) {
			s.Observer = func(ev middleware.Event) {
				logger.Info("request", "outcome", ev.Outcome, "status", ev.Status, "key_hash", ev.KeyHash)
			}
		},
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	var orders atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := orders.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d,"request":%q}`+"\n", n, body)
	})
	srv := &http.Server{Addr: *listen, Handler: idem.Wrap(mux), ReadHeaderTimeout: 10 * time.Second}
	if err := serve(srv, idem, logger, *shutdownTimeout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// serve runs srv until SIGINT or SIGTERM, then shuts down gracefully: it stops
// accepting, lets the requests in flight finish (their responses are stored for
// their retries), then waits for the responses whose storing the middleware
// retries in the background (Handler.Wait), all within timeout. The store is
// closed after serve returns.
func serve(srv *http.Server, idem *middleware.Handler, logger *slog.Logger, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	logger.Info("service listening", "addr", srv.Addr)
	select {
	case err := <-errc:
		return err // could not listen
	case <-ctx.Done():
	}
	stop() // a second signal kills at once
	logger.Info("shutting down: draining requests in flight", "timeout", timeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("requests still running after %v: %w", timeout, err)
	}
	if err := idem.Wait(sctx); err != nil {
		return fmt.Errorf("responses not stored after %v: %w", timeout, err)
	}
	logger.Info("stopped")
	return nil
}
