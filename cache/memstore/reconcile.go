package memstore

// Reconcile jobs (cache.Reconciler): a map under one mutex, scanned for the job
// due first. Jobs are few (one per held unknown outcome of a route that
// reconciles), and each is dropped when it settles or its hold ends.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

var _ cache.Reconciler = (*Store)(nil)

type jobs struct {
	mu sync.Mutex
	m  map[string]*memJob
}

type memJob struct {
	job   []byte // encoded: the caller never shares memory with the store
	due   time.Time
	token string // the claim's; empty when unclaimed
}

// ScheduleReconcile implements cache.Reconciler.
func (s *Store) ScheduleReconcile(_ context.Context, key string, job *cache.Job) error {
	b, err := cache.EncodeJob(job)
	if err != nil {
		return err
	}
	s.jobs.mu.Lock()
	defer s.jobs.mu.Unlock()
	if s.jobs.m == nil {
		s.jobs.m = map[string]*memJob{}
	}
	s.jobs.m[key] = &memJob{job: b, due: job.Due}
	return nil
}

// ClaimReconcile implements cache.Reconciler.
func (s *Store) ClaimReconcile(_ context.Context, now time.Time, token string, lease time.Duration) (string, *cache.Job, error) {
	s.jobs.mu.Lock()
	defer s.jobs.mu.Unlock()
	var first string
	var j *memJob
	for k, mj := range s.jobs.m {
		if !mj.due.After(now) && (j == nil || mj.due.Before(j.due)) {
			first, j = k, mj
		}
	}
	if j == nil {
		return "", nil, cache.ErrNotFound
	}
	job, err := cache.DecodeJob(j.job)
	if err != nil {
		delete(s.jobs.m, first) // never readable: it would come back forever
		return "", nil, err
	}
	j.due, j.token = now.Add(lease), token
	return first, job, nil
}

// UpdateReconcile implements cache.Reconciler.
func (s *Store) UpdateReconcile(_ context.Context, key, token string, job *cache.Job) error {
	b, err := cache.EncodeJob(job)
	if err != nil {
		return err
	}
	s.jobs.mu.Lock()
	defer s.jobs.mu.Unlock()
	j := s.jobs.m[key]
	if j == nil || token == "" || j.token != token {
		return fmt.Errorf("memstore: updating reconcile job: %w", cache.ErrClaimLost)
	}
	j.job, j.due, j.token = b, job.Due, ""
	return nil
}

// FinishReconcile implements cache.Reconciler.
func (s *Store) FinishReconcile(_ context.Context, key, token string) error {
	s.jobs.mu.Lock()
	defer s.jobs.mu.Unlock()
	j := s.jobs.m[key]
	if j == nil || token == "" || j.token != token {
		return fmt.Errorf("memstore: finishing reconcile job: %w", cache.ErrClaimLost)
	}
	delete(s.jobs.m, key)
	return nil
}

// GetReconcile implements cache.Reconciler.
func (s *Store) GetReconcile(_ context.Context, key string) (*cache.Job, error) {
	s.jobs.mu.Lock()
	var b []byte
	if j := s.jobs.m[key]; j != nil {
		b = j.job // replaced, never changed in place
	}
	s.jobs.mu.Unlock()
	if b == nil {
		return nil, cache.ErrNotFound
	}
	return cache.DecodeJob(b)
}
