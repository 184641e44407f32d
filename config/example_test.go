package config_test

import (
	"encoding/json"
	"fmt"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/middleware"
)

// Config is the settings as data (from JSON or YAML, say), by their names; the
// unset ones keep their defaults, the set ones win, zero included. Compile
// builds the core's settings.
func ExampleConfig() {
	var set config.Config
	_ = json.Unmarshal([]byte(`{"require_key": true, "ttl": "48h", "max_body": "1MiB", "handler_timeout": "0s", "key_source": "json:/id"}`), &set)
	cfg := config.Default().Merged(set)
	s, err := cfg.Compile()
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	if _, err := middleware.New(store, middleware.From(s)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.RequireKey, s.TTL, s.MaxBody, s.HandlerTimeout, s.KeySource.Describe())
	bad := config.Default()
	_ = bad.Set("methods", "post")
	fmt.Println(bad.Validate())
	// Output:
	// true 48h0m0s 1048576 0s a string at /id in its JSON body
	// methods: "post" is not an upper-case HTTP method token (write methods in upper case, POST; requests match it in any case)
}
