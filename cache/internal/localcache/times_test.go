package localcache

import (
	"testing"
	"time"
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
