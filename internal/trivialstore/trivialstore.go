// Package trivialstore is a store for tests of the registry of stores
// (internal/stores): a map in the process, with one setting, described by its
// Driver as every store is. A test adds it to stores.Drivers, the one line a new
// store takes, and it is a store of idemproxy (--store trivial://NAME,
// --trivial-max-keys) and a Caddy store module (store trivial <url> {
// max_keys … }). Its semantics are the simplest that serve a request and its
// replay: no lapsed claims held, nothing swept; not for use.
package trivialstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Driver describes the trivial store: trivial://NAME selects it; every NAME has
// a map of its own.
var Driver = cache.Driver{
	Name:     "trivial",
	Title:    "trivial",
	Schemes:  []string{"trivial"},
	Locator:  "url",
	Help:     "trivial://NAME (a map in this process, for tests)",
	Settings: func() cache.Settings { return &Settings{MaxKeys: 100} },
}

// Settings are the trivial store's one setting.
type Settings struct {
	// Trivial store: most keys kept.
	//
	// Default: 100.
	MaxKeys int64 `json:"max_keys"`
}

// Check implements cache.Settings.
func (s *Settings) Check() error {
	if s.MaxKeys < 1 {
		return cache.FieldErrorf(Driver.Name, "max_keys", "must be at least 1, got %d", s.MaxKeys)
	}
	return nil
}

// Validate implements cache.Settings: the URL must name a map.
func (s *Settings) Validate(rawURL string) error {
	if err := s.Check(); err != nil {
		return err
	}
	if _, name, _ := strings.Cut(rawURL, "://"); name == "" {
		return fmt.Errorf("%q: want trivial://NAME", rawURL)
	}
	return nil
}

var (
	mu   sync.Mutex
	maps = map[string]*Store{} // by URL: a store opened again finds its records
)

// Open implements cache.Settings.
func (s *Settings) Open(_ context.Context, rawURL string, _ cache.Env) (cache.Store, func() error, error) {
	if err := s.Validate(rawURL); err != nil {
		return nil, nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	st, ok := maps[rawURL]
	if !ok {
		st = &Store{records: map[string]*entry{}}
		maps[rawURL] = st
	}
	st.mu.Lock()
	st.max = int(s.MaxKeys)
	st.mu.Unlock()
	return st, func() error { return nil }, nil
}

// Store is the map.
type Store struct {
	mu      sync.Mutex
	max     int
	records map[string]*entry
}

type entry struct {
	rec   cache.Record
	token string
}

// live returns the entry under key unless it expired (then gone).
func (s *Store) live(key string) *entry {
	e, ok := s.records[key]
	if ok && time.Now().After(e.rec.ExpiresAt) {
		delete(s.records, key)
		return nil
	}
	return e
}

func (s *Store) ClaimOrGet(_ context.Context, key string, lock cache.Claim) (*cache.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.live(key); e != nil {
		if e.token == lock.Token && e.rec.State == cache.StateInFlight {
			return nil, false, nil
		}
		rec := e.rec
		return &rec, true, nil
	}
	if len(s.records) >= s.max {
		return nil, false, cache.ErrFull
	}
	now := time.Now()
	s.records[key] = &entry{token: lock.Token, rec: cache.Record{Version: cache.FormatVersion, State: cache.StateInFlight,
		Fingerprint: lock.Fingerprint, CreatedAt: now, ExpiresAt: now.Add(lock.Duration), Trace: lock.Trace}}
	return nil, false, nil
}

func (s *Store) Complete(_ context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.live(key); e != nil && e.token != token {
		return cache.ErrClaimLost
	}
	r := *rec
	r.State, r.ExpiresAt = cache.StateCompleted, time.Now().Add(ttl)
	s.records[key] = &entry{token: token, rec: r}
	return nil
}

func (s *Store) Release(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.live(key); e != nil {
		if e.token != token || e.rec.State != cache.StateInFlight {
			return cache.ErrClaimLost
		}
		delete(s.records, key)
	}
	return nil
}

func (s *Store) Extend(_ context.Context, key, token string, lease time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live(key)
	if e == nil || e.token != token || e.rec.State != cache.StateInFlight {
		return cache.ErrClaimLost
	}
	e.rec.ExpiresAt = time.Now().Add(lease)
	return nil
}

func (s *Store) Resolve(_ context.Context, key string, resp *cache.Response, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live(key)
	switch {
	case e == nil:
		return cache.ErrNotFound
	case e.rec.Response == nil || !e.rec.Response.Unknown:
		return cache.ErrNotUnknown
	case resp == nil:
		delete(s.records, key)
	default:
		e.rec.Response, e.rec.ExpiresAt = resp, time.Now().Add(ttl)
	}
	return nil
}

func (s *Store) Get(_ context.Context, key string) (*cache.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live(key)
	if e == nil {
		return nil, cache.ErrNotFound
	}
	rec := e.rec
	return &rec, nil
}

func (s *Store) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live(key) == nil {
		return cache.ErrNotFound
	}
	delete(s.records, key)
	return nil
}

func (s *Store) Ping(context.Context) error { return nil }

var _ cache.Store = (*Store)(nil)
