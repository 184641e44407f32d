package pgstore

import (
	"context"
	"encoding/hex"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache/internal/waiters"
	"github.com/jackc/pgx/v5"
)

// listener is one LISTEN connection per Store (outside the pool), opened on the
// first Subscribe, dispatching each notification (its payload is the changed
// key, in hex) to the local waiters of that key. It reconnects after an error; what is
// announced meanwhile is lost, which waiters tolerate: they also poll.
type listener struct {
	mu      sync.Mutex // guards stop and done
	waiters waiters.Registry[string]
	stop    context.CancelFunc
	done    chan struct{}
	ready   chan struct{} // closed once the first LISTEN succeeded
}

// listenWait bounds how long the first Subscribe waits for the LISTEN
// connection: a notification sent before it listens is lost (waiters poll).
const listenWait = 2 * time.Second

// Subscribe implements cache.Notifier. Resolve and Delete announce the change
// with pg_notify in their own statement, from every process sharing the table;
// Complete and Release do for a claim marked as waited for, which Subscribe does
// (one UPDATE, which writes nothing once the claim is marked or when the key
// holds no claim). The first call waits (up to listenWait) until the store
// listens.
func (s *Store) Subscribe(key string) (<-chan struct{}, func()) {
	ready := s.startListening()
	ch, cancel := s.sub.waiters.Subscribe(key)
	timer := time.NewTimer(listenWait)
	defer timer.Stop()
	select {
	case <-ready:
	case <-timer.C:
	}
	// After listening, before the caller reads the record: a Complete that
	// commits after the mark announces itself, one before it is what the read
	// finds. A failed mark (the database unreachable for markWait) costs the
	// waiter its notification, not correctness: waiters poll.
	ctx, stop := context.WithTimeout(context.Background(), markWait)
	_, _ = s.pool.Exec(ctx, s.q.mark, []byte(key))
	stop()
	return ch, cancel
}

// markWait bounds Subscribe's mark of the claim.
const markWait = 2 * time.Second

// startListening starts the listener unless it runs, and returns the channel
// closed once it first listens. With a local cache, it also starts the
// cache's pings.
func (s *Store) startListening() <-chan struct{} {
	s.sub.mu.Lock()
	defer s.sub.mu.Unlock()
	if s.sub.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.sub.stop, s.sub.done, s.sub.ready = cancel, make(chan struct{}), make(chan struct{})
		go s.listen(ctx, s.sub.ready)
	}
	return s.sub.ready
}

func (s *Store) listen(ctx context.Context, ready chan struct{}) {
	defer close(s.sub.done)
	if s.local != nil {
		var pinging sync.WaitGroup
		pinging.Add(1)
		go func() {
			defer pinging.Done()
			s.pingLoop(ctx)
		}()
		defer pinging.Wait()
	}
	var once sync.Once
	for backoff := 50 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, 2*time.Second) {
		if s.listenOnce(ctx, func() { once.Do(func() { close(ready) }) }) {
			backoff = 50 * time.Millisecond // it was up: reconnect quickly
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// listenOnce connects, listens and dispatches until an error; it reports
// whether LISTEN succeeded. The local cache is flushed once listening (what
// was announced before is lost) and again when the connection fails.
func (s *Store) listenOnce(ctx context.Context, listening func()) bool {
	defer s.local.Flush()
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range s.channels { // one connection: its notifications, of every channel, come in commit order
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return false
		}
	}
	s.local.Flush()
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		if s.local.IsPing(n.Payload) {
			continue
		}
		if key, err := hex.DecodeString(n.Payload); err == nil {
			s.local.Invalidate(string(key))
			s.sub.waiters.Notify(string(key))
		}
	}
}

// pingLoop sends the local cache's pings (localcache.Cache.Ping) on a
// connection of its own, so a busy pool never delays them. It connects at
// once, so that the first ping after the cache was idle costs one round trip.
func (s *Store) pingLoop(ctx context.Context) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		conn = nil // the first ping connects
	}
	s.local.Ping(ctx, func(ctx context.Context, payload string) error {
		if conn == nil {
			c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
			if err != nil {
				return err
			}
			conn = c
		}
		if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, payload); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			return err
		}
		return nil
	})
	if conn != nil {
		conn.Close(context.WithoutCancel(ctx))
	}
}

func (l *listener) close() {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.stop = nil
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}
