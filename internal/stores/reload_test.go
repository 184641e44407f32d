package stores_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// A reload that changes a memory store setting must keep the store: a memory
// store opened again is empty, and every key it forgot would run again. So
// every memory setting is applied to the running store (reload:"live") or
// kept until a restart (reload:"restart"), and none is part of its identity.
func TestMemorySettingsNeverReopen(t *testing.T) {
	for _, f := range conf.Fields(reflect.TypeFor[stores.Memory]()) {
		if f.Reload != conf.ReloadLive && f.Reload != conf.ReloadRestart {
			t.Errorf("memory setting %s: reload tag %q; a change would open an empty store. Apply it to the running store (live, in Memory.Apply) or keep it to a restart", f.Name, f.Reload)
		}
	}
	def := stores.DefaultSettings()
	changed := def
	changed.Memory = stores.Memory{MaxRecords: 7, MaxBytes: 7 << 20}
	for _, url := range []string{"memory", "MEMORY"} {
		if a, b := def.Key("memory"), changed.Key(url); a != b {
			t.Errorf("Key(%q) changes with the memory settings: %q, %q", url, a, b)
		}
	}
}

// Apply sets every live memory setting on the running store, one at a time,
// and names what changed; the store keeps its records.
func TestMemoryApply(t *testing.T) {
	def := stores.DefaultMemory()
	ms, err := def.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	for _, f := range conf.Fields(reflect.TypeFor[stores.Memory]()) {
		if f.Reload != conf.ReloadLive {
			continue
		}
		m := stores.RunningMemory(ms)
		var want stores.Memory
		if err := f.SetJSON(&want, json.RawMessage("123456")); err != nil {
			t.Fatal(err)
		}
		f.Copy(&m, &want)
		got, err := stores.Settings{Memory: m}.Apply(&stores.Opened{Store: ms, Memory: ms})
		if err != nil || !slices.Equal(got, []string{"memory_" + f.Name}) {
			t.Errorf("%s: Apply = %q, %v; want [memory_%s]", f.Name, got, err, f.Name)
		}
		if running := stores.RunningMemory(ms); running != m {
			t.Errorf("%s: the store runs with %+v after Apply(%+v)", f.Name, running, m)
		}
		if again, err := m.Apply(ms); err != nil || again != nil {
			t.Errorf("%s: applied twice: %q, %v; want nothing changed", f.Name, again, err)
		}
	}
	if _, err := (stores.Memory{MaxRecords: 0, MaxBytes: 1}).Apply(ms); err == nil {
		t.Error("Apply took max_records 0")
	}
	if _, err := (stores.Settings{}).Apply(&stores.Opened{}); err != nil {
		t.Errorf("Apply on a store with no live settings: %v", err)
	}
}

// The shared stores' identity is the URL and every setting: a change opens a
// new client on the same server.
func TestKeySharedStores(t *testing.T) {
	def := stores.DefaultSettings()
	for _, c := range []struct {
		url    string
		change func(*stores.Settings)
	}{
		{"redis://h:6379", func(s *stores.Settings) { s.Redis.WaitReplicas = 1 }},
		{"postgres://u@h/db", func(s *stores.Settings) { s.Postgres.SweepInterval = 0 }},
		{"dynamodb://t", func(s *stores.Settings) { s.DynamoDB.InlineLimit = 1 }},
	} {
		changed := def
		c.change(&changed)
		if def.Key(c.url) == changed.Key(c.url) {
			t.Errorf("%s: a changed setting keeps the key", c.url)
		}
		if def.Key(c.url) == def.Key(c.url+"0") {
			t.Errorf("%s: another URL keeps the key", c.url)
		}
		if changed.Key("memory") != def.Key("memory") {
			t.Errorf("%s: its settings change the memory store's key", c.url)
		}
	}
}
