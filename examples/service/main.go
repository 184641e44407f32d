// Command service is a Go HTTP service protected by the idempotency middleware
// directly, with the in-memory store: no proxy in between.
//
//	go run ./examples/service --listen 127.0.0.1:8081
//	curl -i -X POST localhost:8081/orders -H 'Idempotency-Key: o-1' -d '{"sku":"x"}'
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/middleware"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to listen on")
	flag.Parse()

	store, err := memstore.New()
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
	logger.Info("service listening", "addr", *listen)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
