package stores_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/redisstore"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// A reload that changes a memory store setting must keep the store: a memory
// store opened again is empty, and every key it forgot would run again. So
// every memory setting is applied to the running store (reload:"live") or
// kept until a restart (reload:"restart"), and none is part of its identity.
func TestMemorySettingsNeverReopen(t *testing.T) {
	for _, f := range conf.Fields(reflect.TypeFor[memstore.Settings]()) {
		if f.Reload != conf.ReloadLive && f.Reload != conf.ReloadRestart {
			t.Errorf("memory setting %s: reload tag %q; a change would open an empty store. Apply it to the running store (live, in memstore.Settings.Apply) or keep it to a restart", f.Name, f.Reload)
		}
	}
	def, changed := stores.DefaultSettings(), stores.DefaultSettings()
	*changed.Of("memory").(*memstore.Settings) = memstore.Settings{MaxRecords: 7, MaxBytes: 7 << 20}
	for _, url := range []string{"memory", "MEMORY"} {
		if a, b := def.Key("memory"), changed.Key(url); a != b {
			t.Errorf("Key(%q) changes with the memory settings: %q, %q", url, a, b)
		}
	}
}

// Apply sets every live memory setting on the running store, one at a time,
// and names what changed; the store keeps its records.
func TestMemoryApply(t *testing.T) {
	s := stores.DefaultSettings()
	o, err := s.Open(context.Background(), "memory", stores.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ms := o.Store.(*memstore.Store)
	for _, f := range conf.Fields(reflect.TypeFor[memstore.Settings]()) {
		if f.Reload != conf.ReloadLive {
			continue
		}
		m := memstore.SettingsOf(ms)
		var want memstore.Settings
		if err := f.SetJSON(&want, json.RawMessage("123456")); err != nil {
			t.Fatal(err)
		}
		f.Copy(&m, &want)
		next := stores.DefaultSettings()
		*next.Of("memory").(*memstore.Settings) = m
		got, err := next.Apply(o)
		if err != nil || !slices.Equal(got, []string{"memory_" + f.Name}) {
			t.Errorf("%s: Apply = %q, %v; want [memory_%s]", f.Name, got, err, f.Name)
		}
		if running := memstore.SettingsOf(ms); running != m {
			t.Errorf("%s: the store runs with %+v after Apply(%+v)", f.Name, running, m)
		}
		if again, err := m.Apply(ms); err != nil || again != nil {
			t.Errorf("%s: applied twice: %q, %v; want nothing changed", f.Name, again, err)
		}
	}
	if _, err := (&memstore.Settings{MaxRecords: 0, MaxBytes: 1}).Apply(ms); err == nil {
		t.Error("Apply took max_records 0")
	}
	redis := stores.DefaultSettings()
	if _, err := redis.Apply(&stores.Opened{Kind: stores.Drivers[1]}); err != nil {
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
		{"redis://h:6379", func(s *stores.Settings) { s.Of("redis").(*redisstore.Settings).WaitReplicas = 1 }},
		{"postgres://u@h/db", func(s *stores.Settings) { s.Of("postgres").(*pgstore.Settings).SweepInterval = 0 }},
		{"dynamodb://t", func(s *stores.Settings) { s.Of("dynamodb").(*dynamostore.Settings).InlineLimit = 1 }},
	} {
		changed := stores.DefaultSettings()
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

// An open store serves a configuration of the same identity, whatever its
// store_timeout unless the store bounds each of its requests by it (DynamoDB:
// TestDynamoDBOpen).
func TestServes(t *testing.T) {
	s := stores.DefaultSettings()
	o, err := s.Open(context.Background(), "memory", stores.Env{StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if !o.Serves(s.Key("memory"), stores.Env{StoreTimeout: 2 * time.Second}) {
		t.Error("the memory store does not serve another store_timeout")
	}
	if o.Serves(s.Key("redis://h:1"), stores.Env{StoreTimeout: time.Second}) {
		t.Error("the memory store serves a Redis configuration")
	}
}
