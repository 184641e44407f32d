package proxy_test

import (
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// No log line and no error shows a secret of a URL: the upstream's
// user:password and its query token, a store URL's password.
func TestE2ELogsRedactSecrets(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	withSecrets := strings.Replace(up.URL, "http://", "http://ops:upw-s3cret@", 1) + "/?access_token=tok-s3cret"
	p := start(t, "--upstream", withSecrets)
	p.Post(t, "/charges", "k", "x")
	p.Stop(t)
	if strings.Contains(p.Logs.String(), "s3cret") {
		t.Fatalf("a secret of the upstream URL is logged:\n%s", p.Logs)
	}
	if !strings.Contains(p.Logs.String(), "ops:xxxxx@") {
		t.Fatalf("the upstream is not logged with its password hidden:\n%s", p.Logs)
	}
	for _, store := range []string{"redis://:rpw-s3cret@127.0.0.1:1/0", "postgres://app:ppw-s3cret@127.0.0.1:1/db"} {
		code, out := runBin(t, "--upstream", "http://127.0.0.1:1", "--store", store, "--log-format", "json")
		if code == 0 || strings.Contains(out, "s3cret") {
			t.Errorf("--store %s: exit %d, output shows the password:\n%s", store, code, out)
		}
	}
	code, out := runBin(t, "--upstream", "http://ops:upw-s3cret@127.0.0.1:bad/")
	if code != 2 || strings.Contains(out, "s3cret") {
		t.Errorf("a bad upstream URL: exit %d, output shows the password:\n%s", code, out)
	}
}

// Durations are logged as durations, and every request line names the
// client, the route and a request id.
func TestE2ELogsDurationsAndRequestFields(t *testing.T) {
	skipShort(t)
	up := testutil.NewRawUpstream(t, "reset")
	p := startConfig(t, "upstream: http://"+up.Addr()+"\nroutes:\n  - path: /charges\n")
	if r := p.Post(t, "/charges/1", "u1", "x"); r.Status != 502 {
		t.Fatalf("unknown outcome: %+v", r)
	}
	testutil.Eventually(t, 5e9, "the unknown outcome logged", func() bool {
		return strings.Contains(p.Logs.String(), "outcome unknown")
	})
	logs := p.Logs.String()
	if strings.Contains(logs, "86400000000000") || !strings.Contains(logs, `"unknown_hold":"24h0m0s"`) {
		t.Fatalf("unknown_hold not logged as a duration:\n%s", logs)
	}
	waitLog(t, p, `"msg":"request"`, 1)
	logs = p.Logs.String()
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"msg":"request"`) {
			line = l
		}
	}
	var warning string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "outcome unknown") {
			warning = l
		}
	}
	for _, want := range []string{`"client":"127.0.0.1"`, `"route":"/charges"`, `"request_id":"`} {
		if !strings.Contains(line, want) {
			t.Errorf("request line lacks %s: %s", want, line)
		}
		if !strings.Contains(warning, want) {
			t.Errorf("the core's warning for the request lacks %s: %s", want, warning)
		}
	}
}
