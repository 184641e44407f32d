package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
)

// A Go program can learn, before serving, that its Redis would evict
// in-flight claims: CheckEviction answers an *EvictionError naming the policy on
// a real server set to allkeys-lru (or any policy but noeviction), nil on
// noeviction, and a plain error when it cannot tell.
func TestCheckEviction(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("changes the server's configuration")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := redisstore.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin := srv.Client()
	if err := redisstore.CheckEviction(ctx, client); err != nil {
		t.Fatalf("noeviction: %v", err)
	}
	for _, policy := range []string{"allkeys-lru", "volatile-ttl", "allkeys-random"} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		err := redisstore.CheckEviction(ctx, client)
		var ev *redisstore.EvictionError
		if !errors.As(err, &ev) || ev.Policy != policy {
			t.Fatalf("%s: CheckEviction = %v, want an *EvictionError", policy, err)
		}
	}
	srv.Stop()
	err = redisstore.CheckEviction(ctx, client)
	var ev *redisstore.EvictionError
	if err == nil || errors.As(err, &ev) {
		t.Fatalf("Redis down: CheckEviction = %v, want an error that is not an EvictionError", err)
	}
}
