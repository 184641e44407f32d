package proxy_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/faultproxy"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// A claim whose reply is lost (the store ran it; the connection died before
// its answer came back) is answered 503: nothing was forwarded, and the
// client is told to retry. Its retry, once the lost claim's claim has passed,
// must run the operation (once): the instance is alive and knows it never
// sent the request. It must not find the lost claim's lapsed claim and hold
// the key as an unknown outcome for unknown_hold.
func TestE2ELostClaimReplyIsNotHeld(t *testing.T) {
	skipShort(t)
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		fp := faultProxy(t, rs.Addr)
		lostClaimReply(t, fp, "redis://"+fp.Addr()+"/0?max_retries=0&read_timeout=300ms")
	})
	t.Run("postgres", func(t *testing.T) {
		pg := pgtest.Start(t)
		fp := faultProxy(t, pg.Addr)
		lostClaimReply(t, fp, strings.Replace(pg.URL(), pg.Addr, fp.Addr(), 1))
	})
}

func faultProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	if _, _, err := net.SplitHostPort(target); err != nil {
		t.Fatalf("store address %q: %v", target, err)
	}
	fp, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	return fp
}

func lostClaimReply(t *testing.T, fp *faultproxy.Proxy, store string) {
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", store, "--lock-ttl", "1s", "--store-timeout", "300ms")
	if r := p.Post(t, "/charges", "warm", "x"); r.Status != 201 {
		t.Fatalf("warm-up: %+v", r)
	}
	// Every reply from the store comes late, after the client gave up on it
	// (Redis: read_timeout 300ms; PostgreSQL: store_timeout 300ms): the store
	// runs the claim, and its answer is lost to the instance.
	fp.SetLatency(time.Second)
	if r := p.Post(t, "/charges", "lost", "x"); r.Status != 503 || up.Count("lost") != 0 {
		t.Fatalf("the claim whose reply was lost: %d %s, executions %d; want 503 and none", r.Status, r.Body, up.Count("lost"))
	}
	fp.SetLatency(0)
	var r testutil.Response
	testutil.Eventually(t, 10*time.Second, "the retry to get an answer", func() bool {
		r = p.Post(t, "/charges", "lost", "x")
		return r.Status != 409 && r.Status != 503
	})
	if r.Status != 201 || up.Count("lost") != 1 {
		t.Fatalf("the retry of a request answered 503 and never sent: %d %s, executions %d; want it run once",
			r.Status, r.Body, up.Count("lost"))
	}
}
