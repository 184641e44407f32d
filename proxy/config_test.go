package proxy_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/proxy"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestPrecedenceFlagEnvFileDefault(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	os.WriteFile(file, []byte("upstream: http://file:1\nttl: 1h\nlock_ttl: 10s\nlisten: 127.0.0.1:7000\n"), 0o600)
	cfg, err := proxy.ParseArgs([]string{"--config", file, "--ttl", "2h"}, env(map[string]string{
		"IDEMPROXY_TTL": "3h", "IDEMPROXY_LOCK_TTL": "20s",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != 2*time.Hour {
		t.Errorf("ttl = %v: the flag must win", cfg.TTL)
	}
	if cfg.ClaimTTL != 20*time.Second {
		t.Errorf("lock_ttl = %v: the variable must beat the file", cfg.ClaimTTL)
	}
	if cfg.Listen != "127.0.0.1:7000" || cfg.Upstream != "http://file:1" {
		t.Errorf("file values lost: %+v", cfg)
	}
	if cfg.Store != "memory" || cfg.RequireKey {
		t.Errorf("defaults lost: store %q require_key %v", cfg.Store, cfg.RequireKey)
	}
	// IDEMPROXY_CONFIG names the file too.
	cfg, err = proxy.ParseArgs(nil, env(map[string]string{"IDEMPROXY_CONFIG": file}), &bytes.Buffer{})
	if err != nil || cfg.Upstream != "http://file:1" {
		t.Fatalf("IDEMPROXY_CONFIG: %v %+v", err, cfg)
	}
	// Boolean flags and variables.
	cfg, err = proxy.ParseArgs([]string{"--upstream", "http://x", "--require-key", "--fail-open=false"}, env(map[string]string{"IDEMPROXY_FAIL_OPEN": "true"}), &bytes.Buffer{})
	if err != nil || !cfg.RequireKey || cfg.FailOpen {
		t.Fatalf("booleans: %v require=%v failopen=%v", err, cfg.RequireKey, cfg.FailOpen)
	}
}

// A webhook route under a top level that reads bodies as JSON goes back to
// bytes, as docs/fingerprints.md says.
func TestFingerprintWebhookRouteBackToBytes(t *testing.T) {
	t.Setenv("FP_TEST_SECRET", "x")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("upstream: http://u:1\nfingerprint: json\nfingerprint_ignore: [/request_time]\nroutes:\n"+
		"  - path: /hook\n    webhook: github\n    webhook_secrets: [env:FP_TEST_SECRET]\n    fingerprint: bytes\n    fingerprint_ignore: []\n"), 0o600)
	if _, err := proxy.ParseArgs([]string{"--config", file}, os.Getenv, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigRoutesFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(file, []byte(`{"upstream": "http://u:1", "routes": [
		{"path": "/webhooks/github", "key_header": "X-GitHub-Delivery", "scope_headers": [], "ttl": "72h"},
		{"path": "/internal", "enabled": false}]}`), 0o600)
	cfg, err := proxy.ParseArgs([]string{"--config", file}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routes) != 2 || cfg.Routes[0].KeyHeader != "X-GitHub-Delivery" || cfg.Routes[0].ScopeHeaders == nil ||
		len(cfg.Routes[0].ScopeHeaders) != 0 || cfg.Routes[1].Enabled {
		t.Fatalf("routes = %+v", cfg.Routes)
	}
}

func TestBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "--upstream is required"},
		{[]string{"--upstream", "localhost:3000"}, nil, "absolute http"},
		{[]string{"--upstream", "h2c:///no-host"}, nil, "or h2c:// URL"},
		{[]string{"--upstream", "grpc://x:50051"}, nil, "or h2c:// URL"},
		{[]string{"--upstream", "h2c://x:50051", "--key-source", "proto:19000"}, nil, "--key-source: proto:19000: field numbers 19000 to 19999 are reserved"},
		{[]string{"--upstream", "http://x", "--ttl", "soon"}, nil, "--ttl"},
		{[]string{"--upstream", "http://x", "--shutdown-timeout", "-5s"}, nil, "must not be negative"},
		{[]string{"--upstream", "http://x"}, map[string]string{"IDEMPROXY_LOCK_TTL": "x"}, "IDEMPROXY_LOCK_TTL"},
		{[]string{"--upstream", "http://x", "--store", "mysql://db"}, nil, "--store"},
		{[]string{"--upstream", "http://x", "--listen", "8080"}, nil, "--listen"},
		{[]string{"--upstream", "http://x", "--max-body", "ten"}, nil, "not a size"},
		{[]string{"--upstream", "http://x", "--max-body", "10"}, nil, `--max-body: "10" has no unit`},
		{[]string{"--upstream", "http://x", "--methods", "post"}, nil, "--methods: \"post\" is not an upper-case HTTP method token (write methods in upper case, POST; requests match it in any case)"},
		{[]string{"--upstream", "http://x", "--store-statuses", "2xx,!500,700"}, nil, "--store-statuses: "},
		{[]string{"--upstream", "http://x", "--lock-ttl", "0s"}, nil, "--lock-ttl: must be at least 3ms"},
		{[]string{"--upstream", "http://x", "--wait", "5s", "--in-flight-only"}, nil, "--wait: does not combine with in_flight_only"},
		{[]string{"--upstream", "http://x", "--webhook", "stripe", "--webhook-secrets", "env:HOME", "--webhook-tolerance", "0s"}, nil, "--webhook-tolerance: must be positive, got 0s"},
		{[]string{"--upstream", "http://x"}, map[string]string{"IDEMPROXY_LOCK_TTL": "1ms"}, "IDEMPROXY_LOCK_TTL: must be at least 3ms"},
		{[]string{"--config", write("lock.yaml", "upstream: http://x\nlock_ttl: 1ms\n")}, nil, "lock_ttl in " + dir},
		{[]string{"--config", write("routelock.yaml", "upstream: http://x\nroutes:\n  - path: /a\n    lock_ttl: 1ms\n")}, nil, "routes[0] (/a): lock_ttl: must be at least 3ms"},
		{[]string{"--config", write("unitless.yaml", "upstream: http://x\nmax_body: 10\n")}, nil, "has no unit"},
		{[]string{"--upstream", "http://x", "--fingerprint", "xml"}, nil, `--fingerprint: "xml": want bytes, json, form or multipart`},
		{[]string{"--upstream", "http://x", "--fingerprint", "json", "--fingerprint-ignore", "request_time"}, nil, `--fingerprint-ignore: "request_time" is not a JSON pointer`},
		{[]string{"--config", write("fpwebhook.yaml", "upstream: http://x\nfingerprint: json\nroutes:\n  - path: /hook\n    webhook: github\n    webhook_secrets: [env:HOME]\n")}, map[string]string{"HOME": "x"}, "routes[0] (/hook): fingerprint: a webhook route leaves its body out"},
		{[]string{"--upstream", "http://x", "--log-level", "loud"}, nil, "--log-level"},
		{[]string{"--upstream", "http://x", "--require-key=maybe"}, nil, "require-key"},
		{[]string{"--nope"}, nil, "not defined"},
		{[]string{"--upstream", "http://x", "extra"}, nil, "unexpected argument"},
		{[]string{"--config", write("unknown.yaml", "upstream: http://x\nbogus: 1\n")}, nil, `line 2: unknown setting "bogus"`},
		{[]string{"--config", write("badttl.yaml", "upstream: http://x\nttl: forever\n")}, nil, "not a duration"},
		{[]string{"--config", write("route.yaml", "upstream: http://x\nroutes:\n  - path: nope\n")}, nil, "must start with /"},
		{[]string{"--config", write("dup.yaml", "upstream: http://x\nroutes:\n  - path: /a\n  - path: /a\n")}, nil, "twice"},
		{[]string{"--config", write("syntax.yaml", "upstream: [\n")}, nil, "config file"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, nil, "no such file"},
	}
	for _, c := range cases {
		_, err := proxy.ParseArgs(c.args, env(c.env), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: err = %v, want mention of %q", c.args, c.env, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error is not one line: %q", c.args, err)
		}
	}
}

func TestHelpListsEveryFlagAndVariable(t *testing.T) {
	var out bytes.Buffer
	if _, err := proxy.ParseArgs([]string{"--help"}, env(nil), &out); err != proxy.ErrHelp {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"--listen", "--upstream", "--store", "--ttl", "--lock-ttl", "--require-key", "--config",
		"--admin", "IDEMPROXY_LOCK_TTL", "default 24h0m0s", "default memory", "default 127.0.0.1:8080"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// Sizes mean the same on every surface of the proxy: flag, variable, file (and, in
// caddymodule's tests, the Caddyfile), with Caddy's grammar.
func TestSizesMeanTheSameEverywhere(t *testing.T) {
	dir := t.TempDir()
	for text, want := range map[string]int64{"10M": 10_000_000, "1.5MiB": 1_572_864, "10MB": 10_000_000, "64KiB": 65_536, "512B": 512} {
		file := filepath.Join(dir, "c.yaml")
		os.WriteFile(file, []byte("upstream: http://x\nmax_body: "+text+"\n"), 0o600)
		for name, args := range map[string]struct {
			argv []string
			env  map[string]string
		}{
			"flag": {[]string{"--upstream", "http://x", "--max-body", text}, nil},
			"env":  {[]string{"--upstream", "http://x"}, map[string]string{"IDEMPROXY_MAX_BODY": text}},
			"file": {[]string{"--config", file}, nil},
		} {
			cfg, err := proxy.ParseArgs(args.argv, env(args.env), &bytes.Buffer{})
			if err != nil {
				t.Fatalf("%s %s: %v", name, text, err)
			}
			if got := cfg.MaxBody; got != want {
				t.Errorf("%s %s = %d bytes, want %d", name, text, got, want)
			}
		}
	}
}

// A setting added to the core's Settings is a flag and a variable with no other edit.
func TestNewSettingReachesEverySurface(t *testing.T) {
	cfg, err := proxy.ParseArgs([]string{"--upstream", "http://x", "--retry-after", "7s"}, env(nil), &bytes.Buffer{})
	if err != nil || cfg.RetryAfter != 7*time.Second {
		t.Fatalf("--retry-after: %v %v", err, cfg)
	}
	cfg, err = proxy.ParseArgs([]string{"--upstream", "http://x"}, env(map[string]string{"IDEMPROXY_RETRY_AFTER": "3s"}), &bytes.Buffer{})
	if err != nil || cfg.RetryAfter != 3*time.Second {
		t.Fatalf("IDEMPROXY_RETRY_AFTER: %v %v", err, cfg)
	}
}

// A route's set field wins over the top level, zero included.
func TestRouteZeroWins(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("upstream: http://x\nwait: 5s\nhandler_timeout: 1m\nroutes:\n  - path: /now\n    wait: 0s\n    handler_timeout: 0s\n  - path: /inherit\n"), 0o600)
	cfg, err := proxy.ParseArgs([]string{"--config", file}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	now, inherit := cfg.Config.Merged(cfg.Routes[0].Config), cfg.Config.Merged(cfg.Routes[1].Config)
	if now.Wait != 0 || now.HandlerTimeout != 0 {
		t.Errorf("route zeros lost: wait %v handler_timeout %v", now.Wait, now.HandlerTimeout)
	}
	if inherit.Wait != 5*time.Second || inherit.HandlerTimeout != time.Minute {
		t.Errorf("unset route fields must take the top level: wait %v handler_timeout %v", inherit.Wait, inherit.HandlerTimeout)
	}
}

// Reconcile's settings are checked with the route they are in: the request,
// the policy it needs, settings without it; every store keeps jobs.
func TestReconcileConfigErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"routes:\n  - path: /charges\n    reconcile: GET /charges?key={key}\n", ""},
		{"reconcile: GET /charges/{key}\nreconcile_attempts: 3\n", ""},
		{"routes:\n  - path: /charges\n    reconcile: GET charges\n", "routes[0] (/charges): reconcile:"},
		{"routes:\n  - path: /charges\n    reconcile: GET /c/{nope}\n", "{nope}"},
		{"routes:\n  - path: /charges\n    reconcile: GET /c/{key}\n    unknown_outcome: release\n", "needs unknown_outcome hold"},
		{"routes:\n  - path: /charges\n    reconcile_delay: 5s\n", "routes[0] (/charges): reconcile_delay: applies when reconcile is set"},
		{"reconcile: GET /c/{key}\nreconcile_max_delay: 1ms\n", "must be at least reconcile_delay"},
		{"reconcile: GET /c/{key}\nreconcile_done: [404]\n", "reconcile_not_found: 404 is also in reconcile_done"},
		{"store: dynamodb://idem\nroutes:\n  - path: /charges\n    reconcile: GET /c/{key}\n", ""}, // DynamoDB keeps jobs too
		// A not-found answer releases a key once the original can no longer
		// run (upstream_timeout, else handler_timeout) and a second confirms it.
		{"handler_timeout: 0s\nroutes:\n  - path: /charges\n    reconcile: GET /c/{key}\n", "routes[0] (/charges): reconcile: a not-found answer releases a key only once the original can no longer be running upstream, and nothing bounds how long it runs: set upstream_timeout or handler_timeout"},
		{"handler_timeout: 0s\nupstream_timeout: 30s\nroutes:\n  - path: /charges\n    reconcile: GET /c/{key}\n    reconcile_window: 1m\n", ""},
		{"upstream_timeout: 2h\nroutes:\n  - path: /charges\n    reconcile: GET /c/{key}\n", "routes[0] (/charges): reconcile_window: 1h0m0s leaves no room to confirm a not-found answer"},
		{"routes:\n  - path: /charges\n    reconcile: GET /c/{key}\n    handler_timeout: 10m\n    reconcile_window: 5m\n", "make it at least 10m0s"},
		{"reconcile: GET /c/{key}\nreconcile_attempts: 1\n", "(line 3): must be at least 2: a not-found answer releases the key only when a second one confirms it"},
	} {
		file := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(file, []byte("upstream: http://u:1\n"+tc.file), 0o600)
		_, err := proxy.ParseArgs([]string{"--config", file}, env(nil), &bytes.Buffer{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.file, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.file, err, tc.want)
		}
	}
}
