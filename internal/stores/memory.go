package stores

import (
	"github.com/idemproxy/idemproxy/cache/memstore"
)

// Memory is the memory store's settings: this process only, the default. A
// reload applies them to the running store, which keeps its records (reload.go).
type Memory struct {
	MaxRecords int64 `json:"max_records" reload:"live" go:"'memstore.WithMaxRecords'" help:"memory store bound (records, in flight and completed), shared fairly between client scopes: a client's records are evicted only for its own volume or when it holds more than its share (see docs/clients.md)"`
	MaxBytes   int64 `json:"max_bytes" unit:"bytes" reload:"live" go:"'memstore.WithMaxBytes'" help:"memory store bound (bytes, approximate), shared the same way"`
}

// DefaultMemory is the memory store's defaults.
func DefaultMemory() Memory {
	return Memory{MaxRecords: memstore.DefaultMaxRecords, MaxBytes: memstore.DefaultMaxBytes}
}

// Validate checks m.
func (m Memory) Validate() error {
	if m.MaxRecords < 1 {
		return fieldErr("memory", "max_records", "must be at least 1, got %d", m.MaxRecords)
	}
	if m.MaxBytes < 1 {
		return fieldErr("memory", "max_bytes", "must be at least 1B, got %d", m.MaxBytes)
	}
	return nil
}

// Open opens a memory store with m's bounds.
func (m Memory) Open() (*memstore.Store, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return memstore.New(memstore.WithMaxRecords(m.MaxRecords), memstore.WithMaxBytes(m.MaxBytes))
}
