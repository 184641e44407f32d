package redisstore

import (
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/internal/localcache"
)

// The setting's values as Options.LocalCache, and the start-up line each
// gives: auto is the default size (off, saying why, with Redis Cluster), off
// is none, a size is that size.
func TestLocalCacheSetting(t *testing.T) {
	def, _ := DefaultLocalCache()
	for _, c := range []struct {
		setting int64
		cluster bool
		want    int64
		line    string
	}{
		{localcache.Auto, false, def, "on (redis_local_cache auto"},
		{localcache.Auto, true, -1, "Redis Cluster"},
		{0, false, -1, "off (redis_local_cache off)"},
		{32 << 20, false, 32 << 20, "on"},
	} {
		var logged []string
		env := cache.Env{Info: func(msg string, _ ...any) { logged = append(logged, msg) }}
		s := DefaultSettings()
		if s.LocalCache != localcache.Auto {
			t.Fatalf("the default is %d, want auto", s.LocalCache)
		}
		s.LocalCache = c.setting
		got, note := s.localCache(c.cluster, env)
		if len(logged) != 0 {
			t.Fatal("logged before the store opened")
		}
		note()
		if got != c.want || len(logged) != 1 || !strings.Contains(logged[0], c.line) {
			t.Errorf("setting %d (cluster %v) = %d, %q; want %d and a line with %q", c.setting, c.cluster, got, logged, c.want, c.line)
		}
	}
}
