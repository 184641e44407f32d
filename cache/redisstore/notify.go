package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache/internal/waiters"
	"github.com/redis/go-redis/v9"
)

// channel is the pub/sub channel on which this store's scripts announce changes.
// Its payload is the changed Redis key.
func (s *Store) channel() string { return s.prefix + "notify" }

// channelArg is channel() as a script argument, made once: a string
// converted to an interface per call is an allocation.
func (s *Store) channelArg() any { return s.notifyArg }

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
// waiters also poll. Complete and Release announce a claim only once it is
// marked as waited for, which Subscribe does (markScript, one round trip),
// before the caller reads the record: a Complete after the mark announces
// itself, one before it is what the read finds. A failed mark costs the waiter
// its notification, not correctness.
func (s *Store) Subscribe(key string) (<-chan struct{}, func()) {
	s.sub.mu.Lock()
	if s.sub.stop == nil {
		s.startSubscriber()
	}
	s.sub.mu.Unlock()
	ch, cancel := s.sub.waiters.Subscribe(s.prefix + key)
	ctx, stop := context.WithTimeout(context.Background(), markWait)
	_ = markScript.Run(ctx, s.c, []string{s.prefix + key}).Err()
	stop()
	return ch, cancel
}

// markWait bounds Subscribe's mark of the claim.
const markWait = 2 * time.Second

// healthEvery is how long the subscription may be quiet before it is pinged.
const healthEvery = 30 * time.Second

// startSubscriber opens the subscription; s.sub.mu is held. With a local
// cache, it also starts the cache's pings, and every (re)subscription or
// error flushes the cache: what was announced while the connection was down
// is lost.
func (s *Store) startSubscriber() {
	ctx, cancel := context.WithCancel(context.Background())
	s.sub.stop = cancel
	s.sub.done = make(chan struct{})
	ps := s.c.Subscribe(ctx, s.channel())
	var pinging sync.WaitGroup
	if s.local != nil {
		pinging.Add(1)
		go func() {
			defer pinging.Done()
			s.local.Ping(ctx, func(ctx context.Context, payload string) error {
				return s.c.Publish(ctx, s.channel(), payload).Err()
			})
		}()
	}
	go func() { // a blocked Receive ends only when the subscription closes
		<-ctx.Done()
		ps.Close()
	}()
	go func() {
		defer close(s.sub.done)
		defer pinging.Wait()
		for backoff := 10 * time.Millisecond; ; {
			// go-redis reconnects and resubscribes by itself after an error.
			msg, err := ps.ReceiveTimeout(ctx, healthEvery)
			if ctx.Err() != nil {
				return
			}
			var nerr net.Error
			if errors.As(err, &nerr) && nerr.Timeout() {
				// Quiet: a PING tells a live connection from a dead one
				// (whose write fails, and go-redis reconnects).
				_ = ps.Ping(ctx)
				continue
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				s.local.Flush()
			case *redis.Message:
				backoff = 10 * time.Millisecond
				if s.local.IsPing(m.Payload) {
					continue
				}
				if key, ok := strings.CutPrefix(m.Payload, s.prefix); ok {
					s.local.Invalidate(key)
				}
				s.sub.waiters.Notify(m.Payload)
			}
			if err != nil {
				s.local.Flush()
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
			}
		}
	}()
}

// Close stops the store's pipeline workers and its pub/sub subscription, if one
// was opened. Calls after Close fail. It does not close the client, which the
// caller owns. Close is idempotent.
func (s *Store) Close() error {
	s.replays.Close() // before the pipeline workers stop: it writes what it holds
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
