package middleware_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/middleware"
)

// completeDeadlines records whether each Complete's context had a deadline,
// and whether it was cancelled when Complete ran.
type completeDeadlines struct {
	cache.Store
	mu        sync.Mutex
	deadlines []bool
	cancelled []bool
}

func (s *completeDeadlines) Complete(ctx context.Context, key, tok string, rec *cache.Record, ttl time.Duration) error {
	_, has := ctx.Deadline()
	s.mu.Lock()
	s.deadlines = append(s.deadlines, has)
	s.cancelled = append(s.cancelled, ctx.Err() != nil)
	s.mu.Unlock()
	return s.Store.Complete(ctx, key, tok, rec, ttl)
}

// boundedStore is a store that bounds each of its requests itself.
type boundedStore struct{ *completeDeadlines }

func (boundedStore) BoundsRequests() {}

// On a store that bounds each request itself (cache.RequestBounded), Complete
// is not bounded as a whole by store_timeout, and is still detached from the
// client; on any other store, store_timeout bounds it.
func TestCompleteDeadlineOnRequestBoundedStore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bounded  bool
		deadline bool
	}{{"bounds its requests", true, false}, {"does not", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &completeDeadlines{Store: newMem(t)}
			var store cache.Store = rec
			if tc.bounded {
				store = boundedStore{rec}
			}
			c := &counter{}
			h := newHandler(t, store, func(s *middleware.Settings) { s.StoreTimeout = time.Minute }).Wrap(c)
			if w := serve(h, req{Key: "k"}); w.Code != 201 {
				t.Fatalf("first: %d", w.Code)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.deadlines) != 1 || rec.deadlines[0] != tc.deadline || rec.cancelled[0] {
				t.Fatalf("Complete calls: deadline %v cancelled %v; want one, deadline %v, not cancelled", rec.deadlines, rec.cancelled, tc.deadline)
			}
		})
	}
}
