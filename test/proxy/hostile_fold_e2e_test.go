package proxy_test

import (
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Routes matched "in any case" with strings.ToLower, which leaves the letters
// that are lower case already but fold to an ASCII one: ſ (U+017F, upper case
// S) and ı (U+0131, upper case I). Python's re.IGNORECASE, JavaScript's /iu,
// Java's equalsIgnoreCase and Go's strings.EqualFold read /webhooks/ſtripe as
// /webhooks/stripe: an upstream that routes so got an unsigned delivery, and
// /chargeſ skipped require_key. Routes now compare each letter by its upper
// case's lower case, so every spelling such a matcher folds together is one.
func TestHostilePathUnicodeCase(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	for _, path := range []string{"/charge%C5%BF", "/CHARGE%C5%BF/ch_1", "/charge\u017f"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "x"}); r.Status != 400 || !strings.Contains(r.Body, "missing-key") {
			t.Errorf("POST %s without a key: %d %s; want 400 missing-key (the /charges route)", path, r.Status, r.Body)
		}
	}
	for _, path := range []string{"/webhooks/g%C4%B1thub", "/webhooks/%C5%BFtandard", "/WEBHOOKS/%C5%BFTANDARD"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "{}"}); r.Status != 401 {
			t.Errorf("POST %s unsigned: %d %s; want 401", path, r.Status, r.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("%d requests reached the upstream: %v", n, up.Paths())
	}
}

// Windows drops the trailing dots and spaces of a path segment (IIS serving
// files, PHP scripts, anything that opens a path): /charges. and /charges%20
// are /charges there, ".. " is "..", and "..." is ".". They picked no route
// here: an unsigned delivery to /webhooks/github. was forwarded, and
// /internal/..%20/charges passed the disabled /internal route. Routes now read
// a segment without its trailing dots and spaces, and a segment of dots and
// spaces alone is refused like "..".
func TestHostilePathTrailingDotsAndSpaces(t *testing.T) {
	skipShort(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--config", hostileConfig(t, up.URL))
	for _, path := range []string{"/charges.", "/charges%20", "/charges.%20./ch_1", "/CHARGES%2E"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "x"}); r.Status != 400 || !strings.Contains(r.Body, "missing-key") {
			t.Errorf("POST %s without a key: %d %s; want 400 missing-key (the /charges route)", path, r.Status, r.Body)
		}
	}
	for _, path := range []string{"/webhooks/github.", "/webhooks/standard%20"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "{}"}); r.Status != 401 {
			t.Errorf("POST %s unsigned: %d %s; want 401", path, r.Status, r.Body)
		}
	}
	for _, path := range []string{"/internal/..%20/charges", "/internal/.../charges", "/internal/.%20/charges", "/internal/%2E%2E%2E/x"} {
		if r := p.Send(t, testutil.Request{Method: "POST", Target: path, Host: "api.example", Body: "x"}); r.Status != 400 || !strings.Contains(r.Body, "non-canonical-path") {
			t.Errorf("POST %s: %d %s; want 400 non-canonical-path", path, r.Status, r.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("%d requests reached the upstream: %v", n, up.Paths())
	}
}
