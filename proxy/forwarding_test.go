package proxy

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"upstream http://ops:pw@10.0.0.1:3000/x":             "upstream http://ops:xxxxx@10.0.0.1:3000/x",
		`dial "redis://:hunter2@r:6379/0" failed`:            `dial "redis://:xxxxx@r:6379/0" failed`,
		"postgres://app:p%40ss@db/app?sslmode=disable":       "postgres://app:xxxxx@db/app?sslmode=disable",
		"https://api.example/hook?access_token=abc&page=2":   "https://api.example/hook?access_token=xxxxx&page=2",
		"https://api.example/?X-Amz-Signature=abc":           "https://api.example/?X-Amz-Signature=xxxxx",
		"http://u:pw@host:bad/":                              "http://xxxxx@host:bad/",
		"no url here, password=plain":                        "no url here, password=plain",
		"http://user@host/ keeps a user without password":    "http://user@host/ keeps a user without password",
		"two: http://a:1@x/ and rediss://b:2@y/ in one line": "two: http://a:xxxxx@x/ and rediss://b:xxxxx@y/ in one line",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	ps, err := parsePrefixes([]string{"10.0.0.0/8", "192.0.2.7", "::1", "fd00::/8", "10.1.2.3/8"})
	if err != nil || len(ps) != 5 || ps[4].String() != "10.0.0.0/8" || ps[1].Bits() != 32 || ps[2].Bits() != 128 {
		t.Fatalf("%v %v", ps, err)
	}
	for _, bad := range []string{"", "10.0.0.0/33", "example.com", "fe80::1%eth0", "::ffff:10.0.0.0/104", "10.0.0.1/"} {
		if _, err := parsePrefixes([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestForwardedForHostile(t *testing.T) {
	if chain, ok := forwardedFor([]string{"203.0.113.9, [2001:db8::1]", "10.0.0.1"}); !ok || len(chain) != 3 || chain[1].String() != "2001:db8::1" {
		t.Fatalf("%v %v", chain, ok)
	}
	for _, bad := range [][]string{
		{"203.0.113.9, unknown"}, {"1.2.3.4:80"}, {""}, {"1.2.3.4,,5.6.7.8"}, {"fe80::1%eth0"},
		{strings.Repeat("1.2.3.4, ", maxHops) + "1.2.3.4"},
	} {
		if _, ok := forwardedFor(bad); ok {
			t.Errorf("%.60q accepted", bad)
		}
	}
	for _, ok := range []string{`for=1.2.3.4`, `for="[2001:db8::1]:4711";proto=https, for=10.0.0.1`, `By=x;Host="a.example:8443"`} {
		if !validForwarded([]string{ok}) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{`for=`, `for="unterminated`, `for="a\"b"`, `for=1.2.3.4;;`, "for=\"a\x01\"", strings.Repeat("for=a,", maxHops) + "for=a"} {
		if validForwarded([]string{bad}) {
			t.Errorf("%.60q accepted", bad)
		}
	}
}

// The client behind trusted proxies is the last untrusted address from the
// right: addresses a client prepends cannot choose it.
func TestInboundClient(t *testing.T) {
	f, err := newForwarding(&Config{TrustedProxies: []string{"10.0.0.0/8"}, RequestIDHeader: "X-Request-Id"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ peer, xff, want string }{
		{"10.0.0.5:1", "6.6.6.6, 203.0.113.9, 10.0.0.9", "203.0.113.9"},
		{"10.0.0.5:1", "", "10.0.0.5"},
		{"10.0.0.5:1", "10.0.0.8, 10.0.0.9", "10.0.0.8"},
		{"10.0.0.5:1", "garbage", "10.0.0.5"},
		{"198.51.100.1:1", "203.0.113.9", "198.51.100.1"},
		{"[::ffff:10.0.0.5]:1", "203.0.113.9", "203.0.113.9"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		r.Header.Set("X-Request-Id", "lb-1")
		info := f.inbound(r)
		if info.client != c.want {
			t.Errorf("peer %s, XFF %q: client %s, want %s", c.peer, c.xff, info.client, c.want)
		}
		trusted := !strings.HasPrefix(c.peer, "198.")
		if (info.requestID == "lb-1") != trusted || r.Header.Get("X-Request-Id") != info.requestID {
			t.Errorf("peer %s: request id %q, header %q", c.peer, info.requestID, r.Header.Get("X-Request-Id"))
		}
		if !trusted && r.Header.Get("X-Forwarded-For") != "" {
			t.Errorf("peer %s: X-Forwarded-For kept from an untrusted peer", c.peer)
		}
	}
}

func TestValidUpstreamHost(t *testing.T) {
	for _, ok := range []string{"upstream", "client", "api.internal", "api.internal:8443", "10.0.0.1", "10.0.0.1:80", "[::1]:8080", "[::1]"} {
		if err := validUpstreamHost(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "http://api", "api/x", "a b", "::1", "api:", "api:123456", "api:x"} {
		if err := validUpstreamHost(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
