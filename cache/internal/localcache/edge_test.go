package localcache

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Any positive bound works: one smaller than a header keeps nothing and
// panics nowhere; one not a multiple of 8 keeps entries of exactly an eighth
// of it, wrapping, the key put last always held.
func TestOddAndTinyBounds(t *testing.T) {
	created := time.Unix(1_700_000_000, 0)
	for _, max := range []int64{1, 7, 8, 63, 64, 100, 511, 512, 513, 519, 1000, 4099, 65543} {
		g := newRing(max)
		for i := range 200 {
			key := fmt.Sprint("k", i%13)
			n := max/8&^7 - headerSize - int64(len(key)) - 2 // exactly max/8 rounded down to 8
			if n < 0 {
				if g.put(key, "fp", created, created, nil, 1) {
					t.Fatalf("bound %d: kept an entry of %d bytes", max, entrySize(len(key), 2, 0))
				}
				continue
			}
			resp := []byte(strings.Repeat("x", int(n)-i%8))
			if !g.put(key, "fp", created, created, resp, 1) {
				t.Fatalf("bound %d: refused an entry of %d bytes", max, entrySize(len(key), 2, len(resp)))
			}
			at, ok := g.find(key)
			if !ok || g.copyOut(at).resp != string(resp) {
				t.Fatalf("bound %d: the key put last is not held whole", max)
			}
			if g.live > max || g.made() > max {
				t.Fatalf("bound %d: %d bytes live, %d made", max, g.live, g.made())
			}
		}
	}
}

// An empty key, fingerprint and response are kept and come back.
func TestEmptyKeyAndResponse(t *testing.T) {
	c := trusted(t, 1<<20)
	keep(c, "", &cache.Record{State: cache.StateCompleted, Response: &cache.Response{Status: 204}})
	got, ok := c.Get("")
	if !ok || got.Fingerprint != "" || got.Response.Status != 204 || len(got.Response.Body) != 0 {
		t.Fatalf("got %+v, %v", got, ok)
	}
	c.Invalidate("")
	if _, ok := c.Get(""); ok {
		t.Fatal("an announced empty key is still answered")
	}
}

// Concurrent gets, ends, announcements and flushes keep the cache whole
// (run with -race): every answer is a record some End kept for its key.
func TestConcurrentUse(t *testing.T) {
	c := trusted(t, 64<<10)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprint("k", i%17)
				switch (i + w) % 5 {
				case 0, 1:
					keep(c, key, rec(key+strings.Repeat(".", i%3000)))
				case 2:
					if r, ok := c.Get(key); ok && !strings.HasPrefix(string(r.Response.Body), key+".") && string(r.Response.Body) != key {
						t.Errorf("%s answered %.20q", key, r.Response.Body)
					}
				case 3:
					c.Invalidate(key)
				case 4:
					if i%50 == 0 {
						c.Flush()
					}
					_ = c.Stats()
				}
			}
		}()
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	s := c.Stats()
	if s.Bytes < 0 || s.Bytes > s.MaxBytes || s.Records != int64(c.Len()) {
		t.Fatalf("stats %+v", s)
	}
}

// A nil *Cache (no cache) is a no-op in every method, Stats and Ping too.
func TestNilCacheIsANoOp(t *testing.T) {
	var c *Cache
	if s := c.Stats(); s != (cache.LocalCacheStats{}) {
		t.Fatalf("stats %+v", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Ping(ctx, func(context.Context, string) error { t.Error("a nil cache pinged"); return nil })
	if r, ok, err := c.Claim("k", func() (*cache.Record, bool, time.Duration, error) { return rec("x"), true, time.Hour, nil }); !ok || r == nil || err != nil {
		t.Fatal("a nil cache's Claim did not run the claim")
	}
	c.EndEncoded(c.Begin("k"), "f", time.Time{}, time.Time{}, nil, false, time.Hour)
	c.Invalidate("k")
	c.Flush()
	if c.Len() != 0 || c.Carry() != "" || !c.IsPing(pingPrefix+"x 1") {
		t.Fatal("a nil cache held something")
	}
}
