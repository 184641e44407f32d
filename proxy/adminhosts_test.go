package proxy_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/proxy"
)

// admin_hosts is a flag, a variable and a file key; an entry that is not a bare
// host name is refused with the setting named.
func TestAdminHostsSetting(t *testing.T) {
	cfg, err := proxy.ParseArgs([]string{"--upstream", "http://u:1", "--admin-hosts", "admin.internal,Ops.Example."}, env(nil), &bytes.Buffer{})
	if err != nil || !slices.Equal(cfg.AdminHosts, []string{"admin.internal", "Ops.Example."}) {
		t.Fatalf("flag: %v %q", err, cfg.AdminHosts)
	}
	cfg, err = proxy.ParseArgs([]string{"--upstream", "http://u:1"}, env(map[string]string{"IDEMPROXY_ADMIN_HOSTS": "a.example"}), &bytes.Buffer{})
	if err != nil || !slices.Equal(cfg.AdminHosts, []string{"a.example"}) {
		t.Fatalf("variable: %v %q", err, cfg.AdminHosts)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("upstream: http://u:1\nadmin_hosts: [idemproxy-1.svc]\n"), 0o600)
	cfg, err = proxy.ParseArgs([]string{"--config", file}, env(nil), &bytes.Buffer{})
	if err != nil || !slices.Equal(cfg.AdminHosts, []string{"idemproxy-1.svc"}) {
		t.Fatalf("file: %v %q", err, cfg.AdminHosts)
	}
	for _, bad := range []string{"admin.internal:9090", "http://admin.internal", "a b", "-a.example", "a..example"} {
		_, err := proxy.ParseArgs([]string{"--upstream", "http://u:1", "--admin-hosts", "ok.example," + bad}, env(nil), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--admin-hosts") {
			t.Errorf("admin_hosts %q: %v, want an error naming --admin-hosts", bad, err)
		}
	}
}
