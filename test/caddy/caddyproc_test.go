package caddy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// A Caddy under test binds its own ports: its sites listen on ":0" and Caddy
// logs each listener it bound ("port 0 listener", with actual_address); its
// admin endpoint is a unix socket in its home. No port is picked free ahead
// for Caddy to bind later (another process could take it in between).

// globalOptions is the Caddyfile's global options block for a Caddy whose
// home is dir: its admin endpoint a unix socket there.
func globalOptions(dir string) string {
	return "{\n\tadmin unix/" + adminSocket(dir) + "\n\tauto_https off\n\tpersist_config off\n}\n"
}

// adminSocket is the admin endpoint's socket of a Caddy whose home is dir.
func adminSocket(dir string) string { return filepath.Join(dir, "admin.sock") }

// adminAddress is the admin endpoint of a Caddy whose home is dir, as
// caddy reload --address takes it.
func adminAddress(dir string) string { return "unix/" + adminSocket(dir) }

// startCaddy runs `caddy run` on the Caddyfile cfg (written to dir, its
// home; its global options globalOptions(dir), its site ":0") until the test
// ends, and returns once Caddy logged the port its site bound: Addr is
// 127.0.0.1 on that port, Admin the admin socket's address.
func startCaddy(t *testing.T, bin, dir, cfg string) *testutil.Proc {
	t.Helper()
	return startCaddyEnv(t, bin, dir, cfg)
}

// startCaddyEnv is startCaddy with env added to Caddy's environment.
func startCaddyEnv(t *testing.T, bin, dir, cfg string, env ...string) *testutil.Proc {
	t.Helper()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return runCaddy(t, bin, dir, path, env...)
}

// runCaddy runs `caddy run` on the Caddyfile at path (its home dir, its
// global options globalOptions(dir), its site ":0"), env added to its
// environment, until the test ends, as startCaddy does.
func runCaddy(t *testing.T, bin, dir, path string, env ...string) *testutil.Proc {
	t.Helper()
	p := testutil.Start(t, bin, []string{"run", "--config", path, "--adapter", "caddyfile"},
		append([]string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}, env...)...)
	p.Admin = adminAddress(dir)
	relisten(t, p, 0)
	if cfg, err := os.ReadFile(path); err == nil && strings.Contains(string(cfg), adminAddress(dir)) {
		testutil.Eventually(t, 15*time.Second, "Caddy's admin socket", func() bool {
			_, err := os.Stat(adminSocket(dir))
			return err == nil
		})
	}
	return p
}

// listeners are the addresses Caddy logged binding, in order: each config
// binds ":0" anew (a reload included).
func listeners(p *testutil.Proc) []string {
	var out []string
	for _, line := range strings.Split(p.Logs.String(), "\n") {
		var l struct {
			Msg    string `json:"msg"`
			Actual string `json:"actual_address"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "port 0 listener" {
			continue
		}
		if _, port, err := net.SplitHostPort(l.Actual); err == nil {
			out = append(out, "127.0.0.1:"+port)
		}
	}
	return out
}

// relisten waits until Caddy logged more than seen listeners, and sets
// p.Addr to the last.
func relisten(t *testing.T, p *testutil.Proc, seen int) {
	t.Helper()
	var ls []string
	testutil.Eventually(t, 30*time.Second, "Caddy's port 0 listener line", func() bool {
		ls = listeners(p)
		return len(ls) > seen
	})
	p.Addr = ls[len(ls)-1]
}

// loadOK posts the Caddyfile cfg to /load, fails the test unless it is
// accepted, and points p at the new config's listener.
func loadOK(t *testing.T, p *testutil.Proc, dir, cfg string) {
	t.Helper()
	seen := len(listeners(p))
	if code, body := load(t, dir, cfg); code != 200 {
		t.Fatalf("/load: %d %s", code, body)
	}
	relisten(t, p, seen)
}

// reload runs `caddy reload` with the Caddyfile at path (and its flags)
// against the admin socket of the Caddy p whose home is dir, and points p at
// the new config's listener.
func reload(t *testing.T, p *testutil.Proc, bin, dir, path string, flags ...string) {
	t.Helper()
	seen := len(listeners(p))
	args := append([]string{"reload"}, flags...)
	if code, out := testutil.Run(t, bin, append(args, "--config", path, "--adapter", "caddyfile", "--address", adminAddress(dir))); code != 0 {
		t.Fatalf("caddy reload: exit %d\n%s", code, out)
	}
	relisten(t, p, seen)
}

// adminClient talks to the admin endpoint of a Caddy whose home is dir.
func adminClient(dir string) *http.Client {
	sock := adminSocket(dir)
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// admin sends a request to the admin endpoint of the Caddy whose home is
// dir, and returns its status and body.
func admin(t *testing.T, dir, method, path, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://localhost"+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := adminClient(dir).Do(req)
	if err != nil {
		t.Fatalf("%s %s on Caddy's admin endpoint: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// load posts the Caddyfile cfg to the admin API's /load, as `caddy reload`
// does, and returns its status and body.
func load(t *testing.T, dir, cfg string) (int, string) {
	t.Helper()
	return admin(t, dir, "POST", "/load", "text/caddyfile", cfg)
}
