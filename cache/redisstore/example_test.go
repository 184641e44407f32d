package redisstore_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/middleware"
)

// A Go service on Redis. New does not dial: Ping at start-up to learn that Redis
// is unreachable now rather than from the first request's 503, and check its
// eviction policy.
func Example() {
	client, err := redisstore.NewClient("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		log.Fatalf("redis unreachable: %v", err)
	}
	// A Redis that may evict keys would drop in-flight claims at its memory
	// limit, and a duplicate would run: refuse to start on one.
	var evicting *redisstore.EvictionError
	if err := redisstore.CheckEviction(ctx, client); errors.As(err, &evicting) {
		log.Fatal(err)
	} else if err != nil {
		log.Printf("could not check Redis's maxmemory-policy (%v); make sure it is noeviction", err)
	}
	store, err := redisstore.New(client, redisstore.Options{Prefix: "myapp:idem:"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // before the client: it stops the store's pipelines and pub/sub
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.RequireKey = true })
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", idem.Wrap(http.NotFoundHandler())))
}
