package webhooks_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/idemproxy/idemproxy/webhook"
)

// Every webhook preset has its example here, for the proxy (a config with a
// route `webhook: <preset>`) and for Caddy (a `webhook <preset>` block in the
// Caddyfile), which the tests of this folder and caddymodule run: a new preset
// is one entry in package webhook, and this fails until it has its examples.
func TestEveryPresetHasAnExample(t *testing.T) {
	configs, _ := filepath.Glob("*.yaml")
	inConfig := map[string]bool{}
	route := regexp.MustCompile(`(?m)^\s+webhook: (\S+)$`)
	for _, name := range configs {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range route.FindAllStringSubmatch(string(b), -1) {
			inConfig[m[1]] = true
		}
	}
	caddyfile, err := os.ReadFile("Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range webhook.Names() {
		if !inConfig[name] {
			t.Errorf("no example config has a route with webhook: %s", name)
		}
		if !regexp.MustCompile(`(?m)^\s+webhook ` + regexp.QuoteMeta(name) + `$`).Match(caddyfile) {
			t.Errorf("the Caddyfile has no webhook %s block", name)
		}
	}
}
