package cachetest

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// testReconcileJobs: a store that keeps reconcile jobs hands out the job due
// first, to one claimer at a time until its claim lapses; only the claim's
// token updates or finishes it, and a new schedule ends any claim.
func testReconcileJobs(t *testing.T, h Harness) {
	s, ok := h.Store.(cache.Reconciler)
	if !ok {
		t.Skipf("%T keeps no reconcile jobs", h.Store)
	}
	ctx := context.Background()
	base := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	job := func(due time.Duration) *cache.Job {
		return &cache.Job{Route: "/charges", Method: "GET", URL: "/charges?key=k", Header: http.Header{"Authorization": {"Bearer t"}},
			State: cache.JobScheduled, Due: at(due), Deadline: at(time.Hour), Until: at(24 * time.Hour)}
	}
	k1, k2 := Key(t, "1"), Key(t, "2")
	mustDo(t, "schedule k1", s.ScheduleReconcile(ctx, k1, job(10*time.Second)))
	mustDo(t, "schedule k2", s.ScheduleReconcile(ctx, k2, job(5*time.Second)))
	if _, _, err := s.ClaimReconcile(ctx, base, "a", lease); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("claim before any is due: %v, want ErrNotFound", err)
	}
	key, got, err := s.ClaimReconcile(ctx, at(6*time.Second), "a", lease)
	if err != nil || key != k2 {
		t.Fatalf("claim at 6s = %q, %v; want k2 (due first)", key, err)
	}
	if got.URL != "/charges?key=k" || got.Header.Get("Authorization") != "Bearer t" || !got.Due.Equal(at(5*time.Second)) || got.State != cache.JobScheduled {
		t.Fatalf("claimed job = %+v", got)
	}
	if key, _, err := s.ClaimReconcile(ctx, at(6*time.Second), "b", lease); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("second claim while k2 is claimed and k1 not due = %q, %v; want ErrNotFound", key, err)
	}
	if key, _, err = s.ClaimReconcile(ctx, at(11*time.Second), "c", lease); err != nil || key != k1 {
		t.Fatalf("claim at 11s = %q, %v; want k1", key, err)
	}
	next := job(20 * time.Second)
	next.Attempts, next.LastStatus, next.LastError = 1, 500, ""
	if err := s.UpdateReconcile(ctx, k2, "b", next); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("update with a token that never claimed: %v, want ErrClaimLost", err)
	}
	mustDo(t, "update k2 by its claimer", s.UpdateReconcile(ctx, k2, "a", next))
	if err := s.UpdateReconcile(ctx, k2, "a", next); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("update after the claim ended: %v, want ErrClaimLost", err)
	}
	if got, err := s.GetReconcile(ctx, k2); err != nil || got.Attempts != 1 || got.LastStatus != 500 || !got.Due.Equal(at(20*time.Second)) {
		t.Fatalf("GetReconcile(k2) = %+v, %v", got, err)
	}
	mustDo(t, "finish k1", s.FinishReconcile(ctx, k1, "c"))
	if _, err := s.GetReconcile(ctx, k1); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("GetReconcile after finish: %v, want ErrNotFound", err)
	}
	// A claimer that dies: its claim lapses and the job is claimed again; the
	// dead claim's token no longer finishes it.
	if key, _, err = s.ClaimReconcile(ctx, at(21*time.Second), "d", lease); err != nil || key != k2 {
		t.Fatalf("claim at 21s = %q, %v; want k2", key, err)
	}
	if key, _, err = s.ClaimReconcile(ctx, at(22*time.Second+lease), "e", lease); err != nil || key != k2 {
		t.Fatalf("claim after the lease lapsed = %q, %v; want k2 again", key, err)
	}
	if err := s.FinishReconcile(ctx, k2, "d"); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("finish by the lapsed claim: %v, want ErrClaimLost", err)
	}
	// A new schedule ends any claim on the key.
	mustDo(t, "reschedule k2", s.ScheduleReconcile(ctx, k2, job(time.Hour)))
	if err := s.FinishReconcile(ctx, k2, "e"); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("finish after a new schedule: %v, want ErrClaimLost", err)
	}
	if key, _, err = s.ClaimReconcile(ctx, at(time.Hour), "f", lease); err != nil || key != k2 {
		t.Fatalf("claim of the rescheduled job = %q, %v", key, err)
	}
	mustDo(t, "finish k2", s.FinishReconcile(ctx, k2, "f"))

	// Many claimers at once: one wins.
	k3 := Key(t, "3")
	mustDo(t, "schedule k3", s.ScheduleReconcile(ctx, k3, job(0)))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := Token()
			if key, _, err := s.ClaimReconcile(ctx, at(time.Second), tok, lease); err == nil && key == k3 {
				mu.Lock()
				won = append(won, tok)
				mu.Unlock()
			} else if err != nil && !errors.Is(err, cache.ErrNotFound) {
				t.Errorf("claimer %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d claimers won k3, want 1", len(won))
	}
	mustDo(t, "finish k3", s.FinishReconcile(ctx, k3, won[0]))
}

func mustDo(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
