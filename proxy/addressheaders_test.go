package proxy

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// claimsAddress knows every address header in any case and with underscores,
// the whole X-Forwarded- family, and nothing else.
func TestClaimsAddress(t *testing.T) {
	for name := range addressHeaders {
		for _, spelling := range []string{name, strings.ToUpper(name), http.CanonicalHeaderKey(name)} {
			if claims, underscore := claimsAddress(spelling); !claims || underscore {
				t.Errorf("%q: claims %v, underscore %v", spelling, claims, underscore)
			}
			under := strings.ReplaceAll(spelling, "-", "_")
			if claims, underscore := claimsAddress(under); !claims || underscore != (under != spelling) {
				t.Errorf("%q: claims %v, underscore %v", under, claims, underscore)
			}
		}
	}
	long := "X-Forwarded-" + strings.Repeat("a", 40)
	for name, underscore := range map[string]bool{
		"X-Forwarded-For": false, "x-forwarded-port": false, "X-Forwarded-Client-Cert": false, "X_FORWARDED_PROTO": true,
		"X-Forwarded_Prefix": true, "Forwarded": false, long: false, long + "_b": true,
	} {
		if c, u := claimsAddress(name); !c || u != underscore {
			t.Errorf("%.40q: claims %v, underscore %v; want true, %v", name, c, u, underscore)
		}
	}
	for _, name := range []string{
		"", "X", "X-Request-Id", "Content-Type", "Authorization", "Idempotency-Key", "Accept-Encoding", "User-Agent",
		"X-Forwardedx-For", "Client-Ipx", "X-Real-IP-Foo", "Forwarded-Proto", "X-Forwarder-For", "Xx-Forwarded-For",
		"X-Real-Ip" + strings.Repeat("p", 40),
	} {
		if c, _ := claimsAddress(name); c {
			t.Errorf("%.40q claims an address", name)
		}
	}
}

// From an untrusted peer every address header goes; from a trusted one only
// underscore spellings and an X-Real-IP that is not one address. Without an
// allocation.
func TestDropAddressHeaders(t *testing.T) {
	for _, c := range []struct {
		trusted bool
		in      http.Header
		keep    []string
	}{
		{false, http.Header{"X-Real-Ip": {"1.2.3.4"}, "True-Client-Ip": {"1.2.3.4"}, "X-Forwarded-Port": {"1"}, "X_real_ip": {"1"}, "Authorization": {"a"}},
			[]string{"Authorization"}},
		{true, http.Header{"X-Real-Ip": {"1.2.3.4"}, "True-Client-Ip": {"1.2.3.4"}, "X-Forwarded-Port": {"1"}, "X_real_ip": {"1"}, "Authorization": {"a"}},
			[]string{"Authorization", "X-Real-Ip", "True-Client-Ip", "X-Forwarded-Port"}},
		{true, http.Header{"X-Real-Ip": {"1.2.3.4", "5.6.7.8"}}, nil},
		{true, http.Header{"X-Real-Ip": {"unknown"}}, nil},
		{true, http.Header{"X-Real-Ip": {"fe80::1%eth0"}}, nil},
		{true, http.Header{"X-Real-Ip": {" 2001:db8::1 "}}, []string{"X-Real-Ip"}},
	} {
		h := c.in.Clone()
		if kept, want := dropAddressHeaders(h, c.trusted), slices.Contains(c.keep, "X-Real-Ip"); kept != want {
			t.Errorf("trusted %v, %v: reports X-Real-IP kept %v", c.trusted, c.in, kept)
		}
		if len(h) != len(c.keep) {
			t.Errorf("trusted %v, %v: left %v, want %q", c.trusted, c.in, h, c.keep)
		}
		for _, k := range c.keep {
			if _, ok := h[k]; !ok {
				t.Errorf("trusted %v, %v: %s removed", c.trusted, c.in, k)
			}
		}
	}
	h := http.Header{"Content-Type": {"a"}, "Authorization": {"b"}, "Idempotency-Key": {"c"}, "X-Request-Id": {"d"}, "X-Real-Ip": {"1.2.3.4"}}
	if n := testing.AllocsPerRun(100, func() { dropAddressHeaders(h, true) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// xForwardedPrefix agrees with folding case and '_' byte by byte, for every
// byte a header name can hold at every place of the prefix.
func TestXForwardedPrefix(t *testing.T) {
	fold := func(c byte) byte {
		switch {
		case c == '_':
			return '-'
		case 'A' <= c && c <= 'Z':
			return c + 'a' - 'A'
		}
		return c
	}
	for i := range len(xForwarded) {
		for c := range 256 {
			if !httpguts.IsTokenRune(rune(c)) {
				continue
			}
			name := []byte("X-Forwarded-For")
			name[i] = byte(c)
			if got, want := xForwardedPrefix(string(name)), fold(byte(c)) == xForwarded[i]; got != want {
				t.Errorf("%q: %v, want %v", name, got, want)
			}
		}
	}
	if xForwardedPrefix("X-Forwarded") {
		t.Error("X-Forwarded has the prefix")
	}
}
