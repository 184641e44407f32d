package config

import (
	"bytes"
	"encoding/json"

	"github.com/idemproxy/idemproxy/internal/conf"
)

// UnmarshalJSON reads a JSON object of settings by name (Caddy's JSON for the
// handler) into c, recording each as set: Default().Merged(c) is the
// configuration it describes. A value is its text form as a string ("30s",
// "10MiB", ["POST"]) or a JSON number (a duration in nanoseconds, a size in
// bytes). An unknown name is an error.
func (c *Config) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	return c.SetJSON(obj, nil)
}

// SetJSON sets every setting of obj, by name, and records it as set. A member
// that names no setting is an error, unless known reports it is the caller's
// own (a Caddy handler's store and scope).
func (c *Config) SetJSON(obj map[string]json.RawMessage, known func(name string) bool) error {
	return conf.DecodeJSON(fields, c, obj, known)
}

// MarshalJSON writes the settings that were set, by name: durations and
// patterns as text, sizes in bytes.
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(c.JSONObject()) }

// JSONObject is MarshalJSON's object, for a struct that embeds Config and adds
// members of its own.
func (c Config) JSONObject() map[string]any {
	return conf.EncodeJSON(fields, &c, func(f conf.Field) bool { return c.set[f.Name] })
}
