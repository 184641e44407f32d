package middleware

import (
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// errOverloaded: the body does not fit in the body budget.
var errOverloaded = errors.New("the request bodies held in memory reached body_budget")

// errReplayOverloaded: a stored body to replay does not fit in the body budget.
var errReplayOverloaded = errors.New("the bodies held in memory reached body_budget: a replay was refused")

// budget is one pool of body bytes held in memory (request bodies being read
// and fingerprinted, stored bodies being replayed), shared by every Handler
// built with the same size.
type budget struct {
	size int64
	used atomic.Int64
	peak atomic.Int64 // the most held since memory was last returned

	mu       sync.Mutex
	returned time.Time // when memory was last returned
	pending  bool      // a return is scheduled
	free     func()    // returns freed memory to the operating system
}

// Returning memory: how long after the bodies held fell to none, and how often
// at most.
const (
	returnDelay = time.Second
	returnEvery = time.Minute
)

var budgets = struct {
	mu   sync.Mutex
	pool map[int64]*budget
}{pool: map[int64]*budget{}}

// sharedBudget returns the process's pool of size bytes. Pools are never
// dropped: a process sees a handful of sizes, and a reload that keeps the size
// must find the pool its previous configuration's requests still draw from.
func sharedBudget(size int64) *budget {
	budgets.mu.Lock()
	defer budgets.mu.Unlock()
	b := budgets.pool[size]
	if b == nil {
		b = &budget{size: size, free: debug.FreeOSMemory}
		budgets.pool[size] = b
	}
	return b
}

// take reserves n bytes, or reports false (reserving nothing) when they do not
// fit.
func (b *budget) take(n int64) bool {
	for {
		used := b.used.Load()
		if n > b.size-used {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			for peak := b.peak.Load(); used+n > peak && !b.peak.CompareAndSwap(peak, used+n); peak = b.peak.Load() {
			}
			return true
		}
	}
}

// give returns n reserved bytes. When nothing is held any more after a large
// peak, the freed memory goes back to the operating system.
func (b *budget) give(n int64) {
	if b.used.Add(-n) == 0 && b.peak.Load() >= b.size/4 {
		b.scheduleReturn()
	}
}

// scheduleReturn returns memory returnDelay from now, or returnEvery after the
// last return if that is later; one return is scheduled at a time.
func (b *budget) scheduleReturn() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending {
		return
	}
	b.pending = true
	delay := max(returnDelay, time.Until(b.returned.Add(returnEvery)))
	time.AfterFunc(delay, func() {
		b.mu.Lock()
		b.pending = false
		b.returned = time.Now()
		b.peak.Store(b.used.Load())
		b.mu.Unlock()
		b.free()
	})
}

// reservation is what one request reserved; it is returned when Handle returns.
type reservation struct {
	b *budget
	n int64
}

// grow reserves n more bytes for this request, or reports false.
func (h *reservation) grow(n int64) bool {
	if n <= 0 {
		return true
	}
	if !h.b.take(n) {
		return false
	}
	h.n += n
	return true
}

// release returns everything this request reserved.
func (h *reservation) release() {
	if h.n > 0 {
		h.b.give(h.n)
		h.n = 0
	}
}
