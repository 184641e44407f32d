package stores

import (
	"fmt"
	"strings"

	"github.com/idemproxy/idemproxy/cache"
)

// What a reload does with a store is decided here, for the proxy and the Caddy
// module alike, from each setting's reload tag (internal/conf):
//
//   - untagged: the setting is part of the store's identity (Key): a change
//     opens the store again. For Redis, PostgreSQL and DynamoDB that is a new
//     client or pool on the same server, whose records and in-flight claims are
//     there; the old one serves the requests that started on it and is closed
//     after them.
//   - reload:"live": the setting is applied to the open store, which is kept
//     (Apply, cache.LiveSettings). The memory store's settings are all live:
//     its records and in-flight claims exist nowhere else, so opening it again
//     would forget them (TestMemorySettingsNeverReopen).
//   - reload:"restart": the running value is kept until a restart, and the
//     reload names it in its warning (the proxy's restartKept).

// Key is the identity of the store k opens with settings s at rawURL: two
// configurations with the same Key share one open store, and a reload between
// them keeps it. It is the kind, the URL (not for a store in the process, one
// per process however its URL is spelled: a Driver without a Locator) and
// those of its settings that have no reload tag.
func Key(k Entry, s cache.Settings, rawURL string) string {
	var b strings.Builder
	b.WriteString(k.Name)
	if k.Locator != "" {
		b.WriteString("\x00")
		b.WriteString(rawURL)
	}
	for _, f := range Fields(s) {
		if f.Reload == "" {
			fmt.Fprintf(&b, "\x00%s=%s", f.Name, f.Text(s))
		}
	}
	return b.String()
}

// Key is the identity of the store rawURL selects with s (Key). A URL that
// selects no store is its own key.
func (s *Settings) Key(rawURL string) string {
	k, err := Select(rawURL)
	if err != nil {
		return rawURL
	}
	return Key(k, s.Of(k.Name), rawURL)
}

// Serves reports whether o can serve, as it is open, a configuration whose
// store has key (Settings.Key) and is opened with env: the same identity,
// and for a store that bounds each of its requests by env.StoreTimeout
// (cache.RequestBounded) the same store_timeout.
func (o *Opened) Serves(key string, env Env) bool {
	if o.key != key {
		return false
	}
	_, bounded := o.Store.(cache.RequestBounded)
	return !bounded || o.storeTimeout == env.StoreTimeout
}

// Apply gives the open store o the live settings of s (reload:"live") and
// returns the names of those that changed, with their store's prefix
// (memory_max_records). Only a store whose settings are cache.LiveSettings
// has any.
func (s *Settings) Apply(o *Opened) ([]string, error) {
	changed, err := ApplyLive(s.Of(o.Kind.Name), o.Store)
	for i := range changed {
		changed[i] = o.Kind.Name + "_" + changed[i]
	}
	return changed, err
}

// ApplyLive gives store the live settings of st (cache.LiveSettings), and
// returns the names of those that changed; nothing when st has none.
func ApplyLive(st cache.Settings, store cache.Store) ([]string, error) {
	live, ok := st.(cache.LiveSettings)
	if !ok {
		return nil, nil
	}
	return live.Apply(store)
}
