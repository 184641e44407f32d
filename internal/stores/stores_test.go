package stores_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/stores"
)

func TestKindOf(t *testing.T) {
	for url, want := range map[string]string{"memory": "memory", "redis://h:1": "redis", "rediss+sentinel://h:1": "redis", "REDIS://h": "redis"} {
		if got, err := stores.KindOf(url); err != nil || got != want {
			t.Errorf("KindOf(%q) = %q, %v; want %q", url, got, err, want)
		}
	}
	if _, err := stores.KindOf("mysql://u:secret@db"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("mysql: %v (want an error without the password)", err)
	}
}

// An evicting maxmemory-policy is refused at start-up unless allowed: Redis would
// evict in-flight claims first (volatile-ttl) and a duplicate would run.
func TestEvictingRedisIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External {
		t.Skip("changes the server's configuration")
	}
	ctx := context.Background()
	admin := srv.Client()
	type spec struct {
		url   string
		redis redisstore.Settings
		warn  func(string, ...any)
	}
	open := func(sp spec) error {
		s := stores.DefaultSettings()
		*s.Of("redis").(*redisstore.Settings) = sp.redis
		o, err := s.Open(ctx, sp.url, stores.Env{Warn: sp.warn})
		if err == nil {
			o.Close()
		}
		return err
	}
	sp := spec{url: srv.URL(), redis: redisstore.DefaultSettings()}
	if err := open(sp); err != nil {
		t.Fatalf("noeviction: %v", err)
	}
	for _, policy := range []string{"volatile-ttl", "allkeys-lru", "volatile-lru"} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		err := open(sp)
		var ev *redisstore.EvictionError
		if !errors.As(err, &ev) || ev.Policy != policy || strings.Contains(err.Error(), "\n") {
			t.Fatalf("%s: err = %v, want a one-line EvictionError", policy, err)
		}
		var warned []string
		allowed := sp
		allowed.redis.AllowEviction = true
		allowed.warn = func(msg string, args ...any) { warned = append(warned, msg+fmt.Sprint(args...)) }
		if err := open(allowed); err != nil || len(warned) != 1 || !strings.Contains(warned[0], policy) {
			t.Fatalf("%s allowed: err %v, warnings %q", policy, err, warned)
		}
	}
	// A server that refuses CONFIG (managed Redis) is tolerated, with a warning.
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	limited := sp
	limited.url = strings.Replace(srv.URL(), "redis://", "redis://limited:pw@", 1)
	var warned []string
	limited.warn = func(msg string, args ...any) { warned = append(warned, msg) }
	if err := open(limited); err != nil || len(warned) != 1 || !strings.Contains(warned[0], "could not check") {
		t.Fatalf("CONFIG refused: err %v, warnings %q", err, warned)
	}
}

// A clone of the stores' settings shares none of them with the original (a
// copy of the struct would: the proxy's reload keeps running values in a
// clone and leaves the configuration it was given alone).
func TestSettingsClone(t *testing.T) {
	orig := stores.DefaultSettings()
	orig.Of("redis").(*redisstore.Settings).Prefix = "a:"
	clone := orig.Clone()
	clone.Of("redis").(*redisstore.Settings).Prefix = "b:"
	if got := orig.Of("redis").(*redisstore.Settings).Prefix; got != "a:" {
		t.Fatalf("the original's prefix is %q after the clone's changed", got)
	}
	if got := clone.Of("redis").(*redisstore.Settings).Prefix; got != "b:" {
		t.Fatalf("the clone's prefix is %q", got)
	}
	if orig.Key("redis://h:1") == clone.Key("redis://h:1") {
		t.Fatal("the clone's key is the original's")
	}
}
