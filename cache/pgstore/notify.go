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

// Subscribe implements cache.Notifier. Complete, Release, Resolve and Delete
// announce the change with pg_notify in their own statement, from every process
// sharing the table. The first call waits (up to listenWait) until the store
// listens.
func (s *Store) Subscribe(key string) (<-chan struct{}, func()) {
	s.sub.mu.Lock()
	if s.sub.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.sub.stop, s.sub.done, s.sub.ready = cancel, make(chan struct{}), make(chan struct{})
		go s.listen(ctx, s.sub.ready)
	}
	ready := s.sub.ready
	s.sub.mu.Unlock()
	ch, cancel := s.sub.waiters.Subscribe(key)
	select {
	case <-ready:
	case <-time.After(listenWait):
	}
	return ch, cancel
}

func (s *Store) listen(ctx context.Context, ready chan struct{}) {
	defer close(s.sub.done)
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
// whether LISTEN succeeded.
func (s *Store) listenOnce(ctx context.Context, listening func()) bool {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return false
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		if key, err := hex.DecodeString(n.Payload); err == nil {
			s.sub.waiters.Notify(string(key))
		}
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
