package redisstore_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/faultproxy"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/redis/go-redis/v9"
)

// A reply lost with its connection, between idemproxy and a real Redis: go-redis
// re-sends the script, and the re-run must answer as the first did. Before the
// scripts were idempotent for their token, a lost claim reply made the only
// request conflict with itself (409, the key locked for a claim), and a lost
// Complete reply logged "a retry will run again" and counted not_stored.
func TestLostRepliesDoNotConflictWithThemselves(t *testing.T) {
	srv := redistest.Start(t)
	fp, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	client := redis.NewClient(&redis.Options{Addr: fp.Addr(), MaxRetries: 3})
	t.Cleanup(func() { client.Close() })
	for _, pipelines := range []int{-1, 4} { // -1: every call on its own
		store := mustNew(t, client, redisstore.Options{Pipelines: pipelines})
		t.Cleanup(func() { store.Close() })
		var outcomes []middleware.Outcome
		core, err := middleware.New(store, func(s *middleware.Settings) {
			s.Observer = func(ev middleware.Event) { outcomes = append(outcomes, ev.Outcome) }
		})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int64
		api := core.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
		}))
		post(api, keyFor(pipelines, "warm-up"), "") // loads the scripts: a lost NOSCRIPT reply proves nothing

		// The claim's reply is lost.
		outcomes, before := nil, fp.Dropped()
		fp.DropReplies(1)
		if w := post(api, keyFor(pipelines, "lost-claim"), ""); w.Code != http.StatusCreated || runs.Load() != 2 {
			t.Fatalf("pipelines %d: lost claim reply: %d (runs %d), want 201 and one run", pipelines, w.Code, runs.Load())
		}
		if fp.Dropped() != before+1 {
			t.Fatalf("no reply was dropped")
		}
		if len(outcomes) != 1 || outcomes[0] != middleware.OutcomeStored {
			t.Fatalf("pipelines %d: outcomes %v, want [stored]", pipelines, outcomes)
		}

		// The Complete's reply is lost: the first call stored the record.
		outcomes = nil
		armed := make(chan struct{})
		api2 := core.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			fp.DropReplies(1) // the next reply is Complete's
			close(armed)
			w.WriteHeader(http.StatusCreated)
		}))
		if w := post(api2, keyFor(pipelines, "lost-complete"), ""); w.Code != http.StatusCreated {
			t.Fatalf("lost complete reply: %d", w.Code)
		}
		<-armed
		if len(outcomes) != 1 || outcomes[0] != middleware.OutcomeStored {
			t.Fatalf("pipelines %d: lost Complete reply: outcomes %v, want [stored]", pipelines, outcomes)
		}
		if w := post(api2, keyFor(pipelines, "lost-complete"), ""); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after a lost Complete reply: %d, not replayed", w.Code)
		}
	}
}

func keyFor(pipelines int, k string) string { return fmt.Sprintf("%s-%d", k, pipelines) }
