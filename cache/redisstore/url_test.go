package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestNewClientURLs(t *testing.T) {
	good := map[string]func(redis.UniversalClient) bool{
		"redis://127.0.0.1:6379/2": func(c redis.UniversalClient) bool {
			o := c.(*redis.Client).Options()
			return o.Addr == "127.0.0.1:6379" && o.DB == 2 && o.TLSConfig == nil
		},
		"rediss://user:pw@cache.internal:6380/0?dial_timeout=2s&pool_size=50": func(c redis.UniversalClient) bool {
			o := c.(*redis.Client).Options()
			return o.TLSConfig != nil && o.Username == "user" && o.Password == "pw" && o.PoolSize == 50 && o.DialTimeout.Seconds() == 2
		},
		"redis+cluster://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000&read_timeout=500ms": func(c redis.UniversalClient) bool {
			o := c.(*redis.ClusterClient).Options()
			return len(o.Addrs) == 3 && o.ReadTimeout.Milliseconds() == 500
		},
		"rediss+cluster://h:7000": func(c redis.UniversalClient) bool {
			return c.(*redis.ClusterClient).Options().TLSConfig != nil
		},
		"redis+sentinel://s1:26379/1?master_name=mymaster&addr=s2:26379": func(c redis.UniversalClient) bool {
			_, ok := c.(*redis.Client)
			return ok
		},
	}
	for u, check := range good {
		c, err := redisstore.NewClient(u)
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		if !check(c) {
			t.Errorf("%s: options not as the URL says", u)
		}
		c.Close()
	}
	bad := map[string]string{
		"http://h:1":                   "scheme",
		"redis+mesh://h:1":             "mode",
		"redis://":                     "no host",
		"redis://h:1/abc":              "database",
		"redis://h:1?bogus_option=1":   "bogus",
		"redis+sentinel://s1:26379":    "master_name",
		"redis://user:hunter2@h:1/zz":  "database",
		"redis://user:hunter2@h:1?x=1": "x",
		"::not a url":                  "URL",
	}
	for u, want := range bad {
		_, err := redisstore.NewClient(u)
		if err == nil {
			t.Errorf("%s: accepted", u)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not mention %q", u, err, want)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error leaks the password: %v", u, err)
		}
	}
	if r := redisstore.Redact("redis://u:hunter2@h:1/0"); strings.Contains(r, "hunter2") || !strings.Contains(r, "u:xxxxx@h:1") {
		t.Errorf("Redact = %q", r)
	}
}

// A Redis Sentinel URL's password= (go-redis ParseFailoverURL reads it)
// never shows in the store's errors: an unreachable Sentinel (nothing
// listens on port 1) is named with the URL redacted.
func TestSentinelURLErrorsHideThePassword(t *testing.T) {
	for _, rawURL := range []string{
		"redis+sentinel://127.0.0.1:1/0?master_name=m&password=hunter2&dial_timeout=1s",
		"redis+sentinel://127.0.0.1:1/0?master_name=m&password=hunter2&pool_size=x",
	} {
		s := redisstore.Driver.Settings()
		_, _, err := s.Open(context.Background(), rawURL, cache.Env{})
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("opening %s: %v; want an error that does not show the password", redisstore.Redact(rawURL), err)
		}
	}
	if r := redisstore.Redact("redis+sentinel://s:26379/0?master_name=m&password=hunter2"); strings.Contains(r, "hunter2") {
		t.Errorf("Redact = %q", r)
	}
}
