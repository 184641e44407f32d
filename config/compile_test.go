package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/config"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/idemproxy/idemproxy/webhook"
)

// Every setting of Config reaches the core: set to a value other than its
// default, it changes the compiled middleware.Settings. A setting that never
// reached the core (written in Config, read by nobody) fails here, and so does a
// new setting without a row below.
func TestEverySettingReachesTheCore(t *testing.T) {
	t.Setenv("CONFIG_TEST_SECRET", "whsec_dGVzdA==")
	stripe := []string{"webhook", "stripe", "webhook_secrets", "env:CONFIG_TEST_SECRET"}
	rc := []string{"reconcile", "GET /charges/{key}"}
	hmac := []string{"webhook", "hmac", "webhook_secrets", "env:CONFIG_TEST_SECRET", "webhook_header", "X-Signature"}
	cases := map[string]struct {
		base  []string // name, value pairs set before the setting under test
		value string
	}{
		"methods": {nil, "PUT"}, "key_header": {nil, "X-Key"}, "require_key": {nil, "true"}, "min_key_length": {nil, "36"},
		"scope_headers": {nil, "X-Tenant"}, "scope_host": {nil, "false"}, "key_namespace": {nil, "ns"},
		"fingerprint_headers": {nil, "X-Currency"}, "max_request_body": {nil, "1MiB"}, "body_budget": {nil, "512MiB"},
		"max_body": {nil, "1MiB"}, "store_statuses": {nil, "2xx"}, "body_read_timeout": {nil, "5s"},
		"ignore_headers": {nil, "Set-Cookie"}, "fail_open": {nil, "true"}, "ttl": {nil, "1h"}, "lock_ttl": {nil, "10s"},
		"handler_timeout": {nil, "1m"}, "store_timeout": {nil, "1s"}, "complete_retry": {nil, "1m"},
		"unknown_outcome": {nil, "release"}, "unknown_hold": {nil, "1h"}, "retry_after": {nil, "2s"}, "wait": {nil, "1s"},
		"wait_poll": {nil, "100ms"}, "in_flight_only": {nil, "true"},
		"key_source":         {nil, "json:/id"},
		"error_format":       {nil, "stripe"},
		"fingerprint":        {nil, "json"},
		"fingerprint_ignore": {[]string{"fingerprint", "json"}, "/request_time"},
		"webhook":            {[]string{"webhook_secrets", "env:CONFIG_TEST_SECRET"}, "stripe"},
		"webhook_secrets":    {stripe, "env:CONFIG_TEST_SECRET,env:CONFIG_TEST_SECRET"},
		"webhook_tolerance":  {stripe, "1m"},
		"webhook_header":     {hmac, "X-Other"},
		"webhook_encoding":   {hmac, "base64"},
		"webhook_prefix":     {hmac, "sha256="},
		// The reconcile settings reach the route's reconcile rules
		// (ReconcileRules), which the proxy runs beside the core.
		"reconcile":           {nil, "GET /charges?key={key}"},
		"reconcile_headers":   {rc, "Authorization"},
		"reconcile_done":      {rc, "200-299"},
		"reconcile_not_found": {rc, "404,410"},
		"reconcile_delay":     {rc, "2s"},
		"reconcile_backoff":   {rc, "3"},
		"reconcile_max_delay": {rc, "5m"},
		"reconcile_attempts":  {rc, "3"},
		"reconcile_window":    {rc, "2h"},
		"reconcile_timeout":   {rc, "3s"},
	}
	fields := conf.Fields(reflect.TypeFor[config.Config]())
	for _, f := range fields {
		tc, ok := cases[f.Name]
		if !ok {
			t.Errorf("setting %s: no case here; add one with a value other than its default", f.Name)
			continue
		}
		base := config.Default()
		for i := 0; i+1 < len(tc.base); i += 2 {
			if err := base.Set(tc.base[i], tc.base[i+1]); err != nil {
				t.Fatalf("%s: base %s: %v", f.Name, tc.base[i], err)
			}
		}
		changed := base
		args := []string{tc.value}
		if f.List() {
			args = splitComma(tc.value)
		}
		if err := changed.Set(f.Name, args...); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if f.Equal(&base, &changed) {
			t.Fatalf("%s: %q is its base value; pick another", f.Name, tc.value)
		}
		bs, err := base.Compile()
		if f.Name == "webhook" {
			bs, err = config.Default().Compile() // webhook_secrets alone is refused
		}
		if err != nil {
			t.Fatalf("%s: the base does not compile: %v", f.Name, err)
		}
		cs, err := changed.Compile()
		if err != nil {
			t.Fatalf("%s %q does not compile: %v", f.Name, tc.value, err)
		}
		if strings.HasPrefix(f.Name, "reconcile") {
			br, err1 := base.ReconcileRules(bs)
			cr, err2 := changed.ReconcileRules(cs)
			if err1 != nil || err2 != nil || reflect.DeepEqual(br, cr) {
				t.Errorf("setting %s: %q: reconcile rules %+v (%v), base %+v (%v): it never reaches them", f.Name, tc.value, cr, err2, br, err1)
			}
			continue
		}
		if sameSettings(bs, cs) {
			t.Errorf("setting %s: %q compiles to the same middleware.Settings as its default: it never reaches the core", f.Name, tc.value)
		}
	}
	for name := range cases {
		if _, ok := conf.Lookup(fields, name); !ok {
			t.Errorf("case %s names no setting", name)
		}
	}
}

// sameSettings compares compiled settings: a verifier by its configuration (a
// compiled verifier holds a clock function, which never compares equal).
func sameSettings(a, b middleware.Settings) bool {
	va, _ := a.Verifier.(*webhook.Verifier)
	vb, _ := b.Verifier.(*webhook.Verifier)
	if (va == nil) != (vb == nil) || va != nil && !reflect.DeepEqual(va.Webhook, vb.Webhook) {
		return false
	}
	a.Verifier, b.Verifier = nil, nil
	return reflect.DeepEqual(a, b)
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
