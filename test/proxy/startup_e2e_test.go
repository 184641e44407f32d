package proxy_test

import (
	"net"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

func TestE2EBadStartup(t *testing.T) {
	skipShort(t)
	bad := testutil.TempFile(t, "bad.yaml", "upstream: http://x\nttl: [\n")
	// A port this test holds, so --listen on it must fail whoever runs the
	// test (root may bind any port, so a "privileged" port proves nothing).
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	nobody := testutil.FreeAddr(t) // a port nothing listens on
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 2, "--upstream is required"},
		{[]string{"--upstream", "http://x", "--bogus"}, 2, "not defined"},
		{[]string{"--upstream", "http://x", "--store", "redis://" + nobody}, 1, "Redis unreachable"},
		{[]string{"--upstream", "http://x", "--store", "redis://u:hunter2@" + nobody + "/0"}, 1, "xxxxx"},
		{[]string{"--upstream", "http://x", "--store", "redis://h/notadb"}, 2, "database"},
		{[]string{"--config", bad}, 2, "config file"},
		{[]string{"--upstream", "http://x", "--methods", "post"}, 2, "--methods"},
		{[]string{"--upstream", "http://x", "--store-statuses", "2xx,!500,700"}, 2, "--store-statuses"},
		{[]string{"--upstream", "http://x", "--lock-ttl", "0s"}, 2, "--lock-ttl"},
		{[]string{"--upstream", "http://x", "--wait", "5s", "--in-flight-only"}, 2, "--wait"},
		{[]string{"--upstream", "http://x", "--max-body", "10"}, 2, "--max-body"},
		{[]string{"--upstream", "http://x", "--listen", taken.Addr().String()}, 1, "--listen"},
	}
	for _, c := range cases {
		code, out := runBin(t, c.args...)
		s := strings.TrimSpace(out)
		if code != c.code || !strings.Contains(s, c.want) || strings.Contains(s, "goroutine") || strings.Count(s, "\n") > 0 || strings.Contains(s, "hunter2") {
			t.Errorf("%v: exit %d, output %q; want exit %d and one line mentioning %q", c.args, code, s, c.code, c.want)
		}
	}
	if code, out := runBin(t, "--help"); code != 0 || !strings.Contains(out, "IDEMPROXY_UPSTREAM") {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
}
