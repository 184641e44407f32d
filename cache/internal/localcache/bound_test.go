package localcache

import (
	"runtime"
	"testing"
)

// A configured bound is a bound, not a reservation: a cache of a size far
// beyond what the machine has ("1PiB" to mean "no limit") keeps a record like
// any other, and one small record costs a few bytes, not the whole bound.
func TestHugeBoundKeepsARecordWithoutReservingIt(t *testing.T) {
	for _, max := range []int64{1 << 32, 1 << 50, 1 << 62} {
		c := New(max, "me")
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("bound %d: keeping one record panicked: %v", max, p)
				}
			}()
			keep(c, "k", rec("body"))
		}()
		runtime.ReadMemStats(&after)
		if c.Len() != 1 {
			t.Fatalf("bound %d: %d records held, want 1", max, c.Len())
		}
		if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
			t.Fatalf("bound %d: one record of 4 bytes grew the heap by %d bytes", max, grew)
		}
		runtime.KeepAlive(c)
	}
}
