package caddy_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// `idemproxy keys --caddy ADDR` drives Caddy's admin API (the module's
// /idempotency/ routes) as it drives idemproxy's: list --held, get, release
// (the retry runs again), resolve (the retry gets the given answer) and
// delete, by the key hash, with the built binary against real Caddy. Before,
// it knew only idemproxy's paths, which Caddy answers 404.
func TestCaddyKeysCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy and idemproxy; skipped under -short")
	}
	bin := caddyBinary(t)
	idemproxy := testutil.Build(t, "../../cmd/idemproxy")
	reset := testutil.NewRawUpstream(t, "reset") // reads the request, then resets: outcome unknown
	dir := t.TempDir()
	p := startCaddy(t, bin, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tname charges\n\t}\n\treverse_proxy %s\n}\n", reset.Addr()))
	caddyAdmin := adminAddress(dir)
	keys := func(want int, args ...string) string {
		t.Helper()
		code, out := testutil.Run(t, idemproxy, append(append([]string{"keys"}, args...), "--caddy", caddyAdmin))
		if code != want {
			t.Fatalf("idemproxy keys %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	for _, key := range []string{"k-release", "k-resolve"} {
		if r := p.Post(t, "/charges", key, "x"); r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
			t.Fatalf("%s: %d %s; want the held outcome-unknown answer", key, r.Status, r.Body)
		}
	}
	var page adminkeys.HeldPage
	// Which hash is which key is not known here: releasing one tells.
	if out := keys(0, "list", "--held"); json.Unmarshal([]byte(out), &page) != nil || len(page.Held) != 2 {
		t.Fatalf("keys list --held: %s; want the two held keys", out)
	}
	for _, hk := range page.Held {
		var rec adminkeys.KeyRecord
		if out := keys(0, "get", "--hash", hk.KeyHash); json.Unmarshal([]byte(out), &rec) != nil || rec.Response == nil || !rec.Response.Unknown {
			t.Fatalf("keys get --hash %s: %s; want a held record", hk.KeyHash, out)
		}
	}
	if out := keys(0, "release", "--hash", page.Held[0].KeyHash, "--handler", "charges"); !strings.Contains(out, `"released": true`) {
		t.Fatalf("keys release: %s", out)
	}
	ran := "" // the released key: its retry runs again (and is held again)
	for _, key := range []string{"k-release", "k-resolve"} {
		before := reset.Count.Load()
		r := p.Post(t, "/charges", key, "x")
		switch {
		case reset.Count.Load() > before && ran == "":
			ran = key
		case reset.Count.Load() > before || !r.Replayed:
			t.Errorf("%s: %d, replayed=%v, ran again: want the released key alone to run again", key, r.Status, r.Replayed)
		}
	}
	if ran == "" {
		t.Fatal("after keys release: no retry ran again")
	}
	other := map[string]string{"k-release": "k-resolve", "k-resolve": "k-release"}[ran]
	if out := keys(0, "resolve", "--hash", page.Held[1].KeyHash, "--status", "201", "--body", `{"charge":"settled"}`,
		"--response-header", "Content-Type: application/json"); !strings.Contains(out, `"resolved": true`) {
		t.Fatalf("keys resolve: %s", out)
	}
	if r := p.Post(t, "/charges", other, "x"); r.Status != 201 || !r.Replayed || r.Body != `{"charge":"settled"}` {
		t.Errorf("%s after keys resolve: %d replayed=%v %s; want the resolution", other, r.Status, r.Replayed, r.Body)
	}
	keys(0, "delete", "--hash", page.Held[1].KeyHash)
	keys(1, "get", "--hash", page.Held[1].KeyHash) // deleted: not found
	if out := keys(2, "get", "--hash", page.Held[0].KeyHash, "--handler", "nope"); !strings.Contains(out, `no handler named`) {
		t.Errorf("keys get --handler nope: %s; want the handlers named", out)
	}
	if out := keys(2, "get", "k-release"); !strings.Contains(out, "--hash") {
		t.Errorf("keys get KEY --caddy: %s; want to be told to give --hash", out)
	}
}

// Store readiness under Caddy: GET /idempotency/readyz on Caddy's admin
// endpoint answers as idemproxy's /readyz, 200 while the store answers and
// 503 "store unavailable" while it does not; ready again once it is back.
func TestCaddyReadyz(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	srv := redistest.Start(t)
	dir := t.TempDir()
	startCaddy(t, bin, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tname charges\n\t\tstore %s\n\t}\n\trespond `{\"id\":1}` 201\n}\n", srv.URL()))
	if code, body := admin(t, dir, "GET", "/idempotency/readyz", "", ""); code != 200 || !strings.Contains(body, `"status": "ready"`) {
		t.Fatalf("GET /idempotency/readyz: %d %s; want 200 ready", code, body)
	}
	srv.Stop()
	if code, body := admin(t, dir, "GET", "/idempotency/readyz?handler=charges", "", ""); code != 503 || !strings.Contains(body, `"status": "store unavailable"`) {
		t.Fatalf("GET /idempotency/readyz with Redis down: %d %s; want 503 store unavailable", code, body)
	}
	srv.Restart()
	if code, body := admin(t, dir, "GET", "/idempotency/readyz", "", ""); code != 200 {
		t.Fatalf("GET /idempotency/readyz with Redis back: %d %s; want 200", code, body)
	}
}
