package memstore

import (
	"context"
	"fmt"

	"github.com/idemproxy/idemproxy/cache"
)

// Driver describes the memory store to the programs that open stores from
// configuration (idemproxy, the Caddy module): "memory", this process only,
// the default. One serves the whole process, however "memory" is spelled.
var Driver = cache.Driver{
	Name:     "memory",
	Title:    "memory",
	Schemes:  []string{"memory"},
	Help:     "'memory'",
	Settings: func() cache.Settings { s := DefaultSettings(); return &s },
}

// Settings are the memory store's settings from configuration. A reload
// applies them to the running store, which keeps its records and in-flight
// locks (Apply). The shard count, the sweep interval and the per-client share
// floor are constants of the store there, not settings: nothing to reload.
type Settings struct {
	// Memory store bound (records, in flight and completed), shared fairly
	// between client scopes: a client's records are evicted only for its own
	// volume or when it holds more than its share (see docs/clients.md).
	//
	// Default: 1000000.
	MaxRecords int64 `json:"max_records" reload:"live"`

	// Memory store bound (bytes, approximate), shared the same way.
	//
	// Default: 512MiB.
	MaxBytes int64 `json:"max_bytes" unit:"bytes" reload:"live"`
}

// DefaultSettings are the memory store's defaults.
func DefaultSettings() Settings {
	return Settings{MaxRecords: DefaultMaxRecords, MaxBytes: DefaultMaxBytes}
}

// Check implements cache.Settings.
func (m *Settings) Check() error {
	if m.MaxRecords < 1 {
		return cache.FieldErrorf(Driver.Name, "max_records", "must be at least 1, got %d", m.MaxRecords)
	}
	if m.MaxBytes < 1 {
		return cache.FieldErrorf(Driver.Name, "max_bytes", "must be at least 1B, got %d", m.MaxBytes)
	}
	return nil
}

// Validate implements cache.Settings: the URL selects the store and says
// nothing more.
func (m *Settings) Validate(string) error { return m.Check() }

// Open implements cache.Settings: a memory store with m's bounds.
func (m *Settings) Open(context.Context, string, cache.Env) (cache.Store, func() error, error) {
	if err := m.Check(); err != nil {
		return nil, nil, err
	}
	s, err := New(Options{MaxRecords: m.MaxRecords, MaxBytes: m.MaxBytes})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// Apply implements cache.LiveSettings: it sets m's bounds on the running
// store (SetBounds; lower ones evict its oldest completed records at once,
// never an in-flight claim), and returns the names of the settings that
// changed.
func (m *Settings) Apply(store cache.Store) ([]string, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	s, ok := store.(*Store)
	if !ok {
		return nil, fmt.Errorf("memory store settings applied to a %T", store)
	}
	running := SettingsOf(s)
	var changed []string
	if running.MaxRecords != m.MaxRecords {
		changed = append(changed, "max_records")
	}
	if running.MaxBytes != m.MaxBytes {
		changed = append(changed, "max_bytes")
	}
	if len(changed) == 0 {
		return nil, nil
	}
	if err := s.SetBounds(m.MaxRecords, m.MaxBytes); err != nil {
		return nil, err
	}
	return changed, nil
}

// SettingsOf returns the settings s runs with.
func SettingsOf(s *Store) Settings {
	var m Settings
	m.MaxRecords, m.MaxBytes = s.Bounds()
	return m
}

var _ cache.LiveSettings = (*Settings)(nil)
