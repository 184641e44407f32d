package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/errformat"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/keysource"
	"github.com/idemproxy/idemproxy/webhook"
)

// The settings that name a plug-in list what its package lists, in their help
// (every surface: --help, the Caddyfile, docs) and in their row of the
// settings table: a new webhook preset, key source or error format is one entry
// in its package, and a row that misses it fails here.
func TestPluginSettingsListTheRegistries(t *testing.T) {
	values := map[string][]string{"webhook": webhook.Names()}
	for _, k := range keysource.Kinds() {
		values["key_source"] = append(values["key_source"], k.Spec())
	}
	for _, f := range errformat.Formats() {
		values["error_format"] = append(values["error_format"], f.Name)
	}
	for _, p := range webhook.Presets() {
		if p.Timestamp {
			values["webhook_tolerance"] = append(values["webhook_tolerance"], p.Name)
		}
		if p.Custom {
			for _, s := range []string{"webhook_header", "webhook_encoding", "webhook_prefix"} {
				values[s] = append(values[s], p.Name)
			}
		}
	}
	values["webhook_encoding"] = append(values["webhook_encoding"], webhook.Encodings()...)
	fields := conf.Fields(reflect.TypeFor[config.Config]())
	for _, f := range fields {
		if strings.Contains(f.Help, "${") {
			t.Errorf("%s: help %q", f.Name, f.Help)
		}
	}
	rows := map[string]string{}
	for _, line := range strings.Split(testutil.Docs(t, testutil.SettingsDoc), "\n") {
		if name, _, ok := strings.Cut(strings.TrimPrefix(line, "| `"), "`"); ok && strings.HasPrefix(line, "| `") {
			rows[name] = line
		}
	}
	for name, vals := range values {
		f, ok := conf.Lookup(fields, name)
		if !ok {
			t.Fatalf("no setting %s", name)
		}
		for _, v := range vals {
			if !strings.Contains(f.Help, v) {
				t.Errorf("%s: help %q does not name %s", name, f.Help, v)
			}
			if !strings.Contains(rows[name], "`"+v+"`") {
				t.Errorf("%s: its row in %s does not name `%s`", name, testutil.SettingsDoc, v)
			}
		}
	}
}
