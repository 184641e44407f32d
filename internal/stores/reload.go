package stores

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/internal/conf"
)

// What a reload does with a store is decided here, for the proxy and the Caddy
// module alike, from each setting's reload tag (internal/conf):
//
//   - untagged: the setting is part of the store's identity (Key): a change
//     opens the store again. For Redis, PostgreSQL and DynamoDB that is a new
//     client or pool on the same server, whose records and in-flight locks are
//     there; the old one serves the requests that started on it and is closed
//     after them.
//   - reload:"live": the setting is applied to the open store, which is kept
//     (Apply). The memory store's settings are all live: its records and
//     in-flight locks exist nowhere else, so opening it again would forget
//     them (TestMemorySettingsNeverReopen).
//   - reload:"restart": the running value is kept until a restart, and the
//     reload names it in its warning (the proxy's restartKept).
//
// The memory store's shard count, sweep interval and per-client share floor
// are constants of the store here, not settings: nothing to reload.

// kindFields are each store kind's settings.
var kindFields = map[string][]conf.Field{
	"memory":   conf.Fields(reflect.TypeFor[Memory]()),
	"redis":    conf.Fields(reflect.TypeFor[Redis]()),
	"postgres": conf.Fields(reflect.TypeFor[Postgres]()),
	"dynamodb": conf.Fields(reflect.TypeFor[DynamoDB]()),
}

// of returns a pointer to the settings of kind in s.
func (s *Settings) of(kind string) any {
	switch kind {
	case "memory":
		return &s.Memory
	case "redis":
		return &s.Redis
	case "postgres":
		return &s.Postgres
	default:
		return &s.DynamoDB
	}
}

// Key is the identity of the store rawURL selects with s: two configurations
// with the same Key share one open store, and a reload between them keeps it.
// It is the kind, the URL (not for the memory store: one per process, however
// "memory" is spelled) and those of the kind's settings that have no reload
// tag. A URL that selects no store is its own key.
func (s Settings) Key(rawURL string) string {
	kind, err := KindOf(rawURL)
	if err != nil {
		return rawURL
	}
	var b strings.Builder
	b.WriteString(kind)
	if kind != "memory" {
		b.WriteString("\x00")
		b.WriteString(rawURL)
	}
	settings := s.of(kind)
	for _, f := range kindFields[kind] {
		if f.Reload == "" {
			fmt.Fprintf(&b, "\x00%s=%s", f.Name, f.Text(settings))
		}
	}
	return b.String()
}

// Apply gives the open store o the live settings of s (reload:"live") and
// returns the names of those that changed, with their store's prefix
// (memory_max_records). Only the memory store has any.
func (s Settings) Apply(o *Opened) ([]string, error) {
	if o.Memory == nil {
		return nil, nil
	}
	changed, err := s.Memory.Apply(o.Memory)
	for i := range changed {
		changed[i] = "memory_" + changed[i]
	}
	return changed, err
}

// Apply sets m on the running memory store ms, whose records and in-flight
// locks stay: its bounds (SetBounds; lower ones evict its oldest completed
// records at once, never an in-flight lock). It returns the names of the
// settings that changed.
func (m Memory) Apply(ms *memstore.Store) ([]string, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	running := RunningMemory(ms)
	var changed []string
	for _, f := range kindFields["memory"] {
		if !f.Equal(&running, &m) {
			changed = append(changed, f.Name)
		}
	}
	if len(changed) == 0 {
		return nil, nil
	}
	if err := ms.SetBounds(m.MaxRecords, m.MaxBytes); err != nil {
		return nil, err
	}
	return changed, nil
}

// RunningMemory is the settings the memory store ms runs with.
func RunningMemory(ms *memstore.Store) Memory {
	var m Memory
	m.MaxRecords, m.MaxBytes = ms.Bounds()
	return m
}
