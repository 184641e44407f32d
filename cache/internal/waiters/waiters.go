// Package waiters is the registry of goroutines waiting for a key's record to
// change, shared by the stores that implement cache.Notifier.
package waiters

import (
	"sync"
	"sync/atomic"
)

// Registry maps keys to the channels of their waiters. The zero value is ready.
type Registry[K comparable] struct {
	mu sync.Mutex
	m  map[K][]chan struct{}
	n  atomic.Int64 // keys with waiters: Notify skips the claim when there are none
}

// Subscribe returns a channel closed at k's next Notify, and a function to call
// when the caller no longer waits.
func (r *Registry[K]) Subscribe(k K) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	if r.m == nil {
		r.m = make(map[K][]chan struct{})
	}
	if len(r.m[k]) == 0 {
		r.n.Add(1)
	}
	r.m[k] = append(r.m[k], ch)
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		list := r.m[k]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		switch {
		case len(list) > 0:
			r.m[k] = list
		case r.m[k] != nil:
			delete(r.m, k)
			r.n.Add(-1)
		}
	}
}

// Notify wakes every waiter of k.
func (r *Registry[K]) Notify(k K) {
	if r.n.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if list, ok := r.m[k]; ok {
		for _, c := range list {
			close(c)
		}
		delete(r.m, k)
		r.n.Add(-1)
	}
}
