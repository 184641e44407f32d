package caddy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Inside real Caddy, a keyed POST that asks to switch protocols is refused with
// 400 upgrade-refused before reverse_proxy sees it: an upstream that acted and
// answered 101 would leave no answer to store, and every retry would run again.
func TestCaddyUpgradeOnAKeyedRequestIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	up := testutil.NewRawUpstream(t, "upgrade")
	addr := caddySite(t, fmt.Sprintf("\treverse_proxy %s\n", up.Addr())).Addr
	exchange := func(extra string) (int, string) {
		a := testutil.RawExchange(t, addr, fmt.Sprintf("POST /charges HTTP/1.1\r\nHost: %s\r\n%sContent-Length: 1\r\n\r\nx", addr, extra))
		return a.Status, a.Header.Get("Idempotency-Problem")
	}
	var got []string
	for range 2 { // the request and its retry, once the first has settled
		deadline := time.Now().Add(5 * time.Second)
		for {
			status, problem := exchange("Idempotency-Key: cu1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
			if status == 409 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond) // the first still holds its switched connection
				continue
			}
			got = append(got, fmt.Sprint(status, " ", problem))
			break
		}
	}
	want := "400 urn:idemproxy:problem:upgrade-refused"
	if n := up.Count.Load(); n != 0 || got[0] != want || got[1] != want {
		t.Fatalf("keyed upgrade through Caddy: answered %q, the upstream executed it %d times; want %q twice and no execution", got, n, want)
	}
	// Without a key nothing is promised: the upgrade reaches the upstream.
	if status, _ := exchange("Upgrade: websocket\r\nConnection: Upgrade\r\n"); status != 101 || up.Count.Load() != 1 {
		t.Fatalf("an upgrade without a key: %d (upstream %d), want the upstream's 101", status, up.Count.Load())
	}
}
