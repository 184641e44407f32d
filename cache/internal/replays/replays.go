// Package replays adds up the replay counts of a store whose writes are round
// trips (Redis, PostgreSQL, DynamoDB), so that counting a replay costs none:
// counts are kept in memory, by key, and written in one batch every
// cache.ReplayFlush and when the store closes. A count is lost when its
// process dies before the next flush, or when a flush fails (it is not
// retried: the counts are for operators, and approximate).
package replays

import (
	"context"
	"sync"
	"time"
)

// MaxKeys bounds the keys a batch holds: counts of other keys are dropped
// until the next flush.
const MaxKeys = 10000

// Count is one key's replays since the last flush.
type Count struct {
	Key     string
	Created time.Time // the record's CreatedAt: a record replaced meanwhile is not counted
	N       int64
	Last    time.Time
}

// Batch adds counts up and flushes them.
type Batch struct {
	flush   func(context.Context, []Count) error
	timeout time.Duration

	interval time.Duration

	mu      sync.Mutex
	pending map[string]*Count
	started bool // the flushing goroutine runs (from the first Add)
	closed  bool

	stop chan struct{}
	done chan struct{}
}

// New returns a batch that calls flush with what it added up every interval
// (and at Close), each call bounded by timeout. Its goroutine starts with
// the first Add: a store that replays nothing runs none.
func New(interval, timeout time.Duration, flush func(context.Context, []Count) error) *Batch {
	return &Batch{flush: flush, timeout: timeout, interval: interval, pending: map[string]*Count{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// Add counts one replay of key's record, created at created, at at.
func (b *Batch) Add(key string, created, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if !b.started {
		b.started = true
		go b.loop(b.interval)
	}
	c := b.pending[key]
	switch {
	case c != nil && c.Created.Equal(created):
	case c != nil: // another record under the key: the newer one's
		if created.Before(c.Created) {
			return
		}
		*c = Count{Key: key, Created: created}
	case len(b.pending) >= MaxKeys:
		return
	default:
		c = &Count{Key: key, Created: created}
		b.pending[key] = c
	}
	c.N++
	if at.After(c.Last) {
		c.Last = at
	}
}

// take empties the batch.
func (b *Batch) take() []Count {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		return nil
	}
	out := make([]Count, 0, len(b.pending))
	for _, c := range b.pending {
		out = append(out, *c)
	}
	clear(b.pending)
	return out
}

func (b *Batch) loop(interval time.Duration) {
	defer close(b.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
			_ = b.Flush(ctx)
			cancel()
		case <-b.stop:
			return
		}
	}
}

// Flush writes what was added up now.
func (b *Batch) Flush(ctx context.Context) error {
	counts := b.take()
	if len(counts) == 0 {
		return nil
	}
	return b.flush(ctx, counts)
}

// Close stops the batch and flushes what it holds. Later Adds are dropped.
func (b *Batch) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	started := b.started
	b.mu.Unlock()
	close(b.stop)
	if started {
		<-b.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	_ = b.Flush(ctx)
}
