package redisstore

import (
	"context"
	"sync"

	"github.com/idemproxy/idemproxy/cache/internal/waiters"
)

// channel is the pub/sub channel on which this store's scripts announce changes.
// Its payload is the changed Redis key.
func (s *Store) channel() string { return s.prefix + "notify" }

// subscriber is one pub/sub connection per Store, opened on the first Subscribe,
// dispatching announcements to the local waiters of each key.
type subscriber struct {
	mu      sync.Mutex // guards stop and done
	waiters waiters.Registry[string]
	stop    context.CancelFunc
	done    chan struct{}
}

// Subscribe implements cache.Notifier. Announcements come from every process
// sharing the store; one may be lost (e.g. while the connection reconnects), so
// waiters also poll.
func (s *Store) Subscribe(key string) (<-chan struct{}, func()) {
	s.sub.mu.Lock()
	if s.sub.stop == nil {
		s.startSubscriber()
	}
	s.sub.mu.Unlock()
	return s.sub.waiters.Subscribe(s.prefix + key)
}

// startSubscriber opens the subscription; s.sub.mu is held.
func (s *Store) startSubscriber() {
	ctx, cancel := context.WithCancel(context.Background())
	s.sub.stop = cancel
	s.sub.done = make(chan struct{})
	ps := s.c.Subscribe(ctx, s.channel())
	go func() {
		defer close(s.sub.done)
		defer ps.Close()
		msgs := ps.Channel() // go-redis reconnects and resubscribes by itself
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				s.sub.waiters.Notify(m.Payload)
			}
		}
	}()
}

// Close stops the store's pipeline workers and its pub/sub subscription, if one
// was opened. Calls after Close fail. It does not close the client, which the
// caller owns. Close is idempotent.
func (s *Store) Close() error {
	if s.pipe != nil {
		s.pipe.close()
	}
	s.sub.mu.Lock()
	stop, done := s.sub.stop, s.sub.done
	s.sub.stop = nil
	s.sub.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return nil
}
