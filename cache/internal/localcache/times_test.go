package localcache

import (
	"math"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// A record's times come back the same instant however far they are from
// 1970: a ttl of a few centuries (time.Duration allows 292 years) gives an
// ExpiresAt past 2262, beyond what Unix nanoseconds in an int64 hold, and
// the store itself (Unix ms) answers it whole.
func TestFarTimesComeBackTheSameInstant(t *testing.T) {
	c := trusted(t, 1<<20)
	created := time.UnixMilli(time.Now().UnixMilli())
	for _, expires := range []time.Time{
		created.Add(280 * 365 * 24 * time.Hour), // ttl 280 years
		time.Date(2300, 1, 2, 3, 4, 5, 6000, time.UTC),
		time.Date(1600, 1, 2, 3, 4, 5, 6000, time.UTC),
	} {
		r := rec("body")
		r.CreatedAt, r.ExpiresAt = created, expires
		keep(c, "k", r)
		got, ok := c.Get("k")
		if !ok {
			t.Fatal("not held")
		}
		if !got.ExpiresAt.Equal(expires) || !got.CreatedAt.Equal(created) {
			t.Fatalf("kept expiring %v, created %v; came back %v, %v", expires, created, got.ExpiresAt, got.CreatedAt)
		}
	}
}

// The longest ttl (time.Duration's largest, "106751d" meaning "forever")
// keeps a record that is answered: its local expiry, the read's send time
// plus the ttl, saturates rather than overflowing into the past.
func TestLongestTTLIsAnswered(t *testing.T) {
	c := trusted(t, 1<<20)
	time.Sleep(time.Millisecond) // the cache's clock has moved on from its start
	c.End(c.Begin("k"), rec("body"), time.Duration(math.MaxInt64))
	blob, _ := cache.EncodeResponse(&cache.Response{Status: 200})
	c.EndEncoded(c.Begin("w"), "f", time.Now(), time.Now(), blob, false, time.Duration(math.MaxInt64)-time.Millisecond)
	if _, ok := c.Get("k"); !ok {
		t.Fatal("a record read with the longest ttl is not answered")
	}
	if _, ok := c.Get("w"); !ok {
		t.Fatal("a record written with the longest ttl is not answered")
	}
}
