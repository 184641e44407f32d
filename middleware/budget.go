package middleware

import (
	"errors"
	"sync"
	"sync/atomic"
)

// DefaultBodyBudget is the default bound on the request-body bytes that keyed
// requests hold in memory at once, process-wide.
const DefaultBodyBudget = 256 << 20 // 256 MiB

// WithBodyBudget bounds the request-body bytes that tracked requests hold in
// memory at once (the core buffers a body to fingerprint it), across every
// Handler in the process built with the same n: the proxy's routes share one
// budget, and so do a Caddy config's handlers and those of the config that
// replaces it on a reload. A body with a declared Content-Length reserves it
// before a byte is read; one of unknown length reserves as its buffer grows.
// What a request reserved is returned when Handle returns. A request that does
// not fit is answered 503 overloaded with Retry-After, nothing claimed or
// forwarded. n must be at least max_request_body, so that one request of the
// largest size fits when it is alone. Default DefaultBodyBudget.
func WithBodyBudget(n int64) Option { return func(c *config) { c.bodyBudget = n } }

// errOverloaded: the body does not fit in the body budget.
var errOverloaded = errors.New("the request bodies held in memory reached body_budget")

// budget is one pool of request-body bytes, shared by every Handler built with
// the same size.
type budget struct {
	size int64
	used atomic.Int64
}

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
		b = &budget{size: size}
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
			return true
		}
	}
}

// give returns n reserved bytes.
func (b *budget) give(n int64) { b.used.Add(-n) }

// Used returns the bytes reserved now, for tests.
func (b *budget) inUse() int64 { return b.used.Load() }

// bodyHold is what one request reserved; it is returned when Handle returns.
type bodyHold struct {
	b *budget
	n int64
}

// grow reserves n more bytes for this request, or reports false.
func (h *bodyHold) grow(n int64) bool {
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
func (h *bodyHold) release() {
	if h.n > 0 {
		h.b.give(h.n)
		h.n = 0
	}
}
