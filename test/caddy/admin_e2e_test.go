package caddy_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/internal/redistest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Held keys settled through Caddy's own admin API (admin.api.idempotency),
// inside real Caddy, by the key hash: listed, read, released (the retry runs
// again), resolved (the retry gets the given answer) and purged. Before,
// settling a held key needed an idemproxy admin listener on the same store.
func TestCaddyAdminSettlesHeldKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	reset := testutil.NewRawUpstream(t, "reset") // reads the request, then resets: outcome unknown
	dir := t.TempDir()
	p := startCaddy(t, bin, dir, globalOptions(dir)+fmt.Sprintf(":0 {\n\tidempotency {\n\t\tname charges\n\t}\n\treverse_proxy %s\n}\n", reset.Addr()))
	held := func(key string) {
		t.Helper()
		if r := p.Post(t, "/charges", key, "x"); r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
			t.Fatalf("%s: %d %s; want the held outcome-unknown answer", key, r.Status, r.Body)
		}
	}
	held("k-release")
	held("k-resolve")

	code, body := admin(t, dir, "GET", "/idempotency/keys?state=held", "", "")
	var page adminkeys.HeldPage
	if code != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Held) != 2 {
		t.Fatalf("GET /idempotency/keys?state=held: %d %s; want the two held keys", code, body)
	}
	hashes := map[string]bool{}
	for _, hk := range page.Held {
		hashes[hk.KeyHash] = true
		if hk.Kind != "no_answer" || hk.Status != 502 {
			t.Errorf("held key %+v; want no_answer, 502", hk)
		}
	}
	// Which hash is which key: read each record, then settle by hash.
	keyHash := map[string]string{} // key → hash
	for h := range hashes {
		code, body := admin(t, dir, "GET", "/idempotency/keys?hash="+h, "", "")
		var rec adminkeys.KeyRecord
		if code != 200 || json.Unmarshal([]byte(body), &rec) != nil || rec.Response == nil || !rec.Response.Unknown {
			t.Fatalf("GET /idempotency/keys?hash=%s: %d %s; want a held record", h, code, body)
		}
		keyHash[fmt.Sprint(len(keyHash))] = h
	}
	runs := reset.Count.Load()
	// A POST that is not JSON is refused, as idemproxy's admin listener
	// refuses it: a browser sends a form or text/plain POST cross-site
	// without a preflight. Before, Caddy's resolve took it.
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded"} {
		code, body = admin(t, dir, "POST", "/idempotency/resolve?hash="+keyHash["1"], ct, `{"status":200,"body":"chosen by a web page"}`)
		if code != 415 {
			t.Fatalf("POST /idempotency/resolve with Content-Type %q: %d %s; want 415", ct, code, body)
		}
	}
	// Release one: its retry runs again (and is held again: the upstream resets).
	code, body = admin(t, dir, "POST", "/idempotency/release?hash="+keyHash["0"], "application/json", "")
	if code != 200 || !strings.Contains(body, `"released": true`) {
		t.Fatalf("POST /idempotency/release: %d %s", code, body)
	}
	code, body = admin(t, dir, "POST", "/idempotency/resolve?hash="+keyHash["1"], "application/json",
		`{"status":201,"headers":{"Content-Type":["application/json"]},"body":"{\"charge\":\"settled\"}"}`)
	if code != 200 || !strings.Contains(body, `"resolved": true`) {
		t.Fatalf("POST /idempotency/resolve: %d %s", code, body)
	}
	var ran, resolved int
	for _, key := range []string{"k-release", "k-resolve"} {
		r := p.Post(t, "/charges", key, "x")
		switch {
		case r.Status == 201 && r.Replayed && r.Body == `{"charge":"settled"}`:
			resolved++
		case r.Status == 502 && !r.Replayed:
			ran++ // released: ran again (and was held again)
		default:
			t.Errorf("%s after settling: %d replayed=%v %s", key, r.Status, r.Replayed, r.Body)
		}
	}
	if ran != 1 || resolved != 1 || reset.Count.Load() != runs+1 {
		t.Fatalf("after settling: %d ran again, %d resolved, upstream %d more; want one each and one more run", ran, resolved, reset.Count.Load()-runs)
	}
	// Purge the resolved one: its record is gone.
	code, _ = admin(t, dir, "DELETE", "/idempotency/keys?hash="+keyHash["1"], "", "")
	if code != 200 {
		t.Fatalf("DELETE /idempotency/keys: %d", code)
	}
	if code, body := admin(t, dir, "GET", "/idempotency/keys?hash="+keyHash["1"], "", ""); code != 404 {
		t.Fatalf("after the purge: %d %s; want 404", code, body)
	}
	if code, body := admin(t, dir, "GET", "/idempotency/handlers", "", ""); code != 200 || !strings.Contains(body, `"name": "charges"`) {
		t.Fatalf("GET /idempotency/handlers: %d %s", code, body)
	}
}

// Two handlers on one server whose stores differ (other Redis prefixes,
// other PostgreSQL tables) are two stores to the admin API: without
// ?handler= it asks for one, instead of answering from either; with it, each
// handler's key is found in its own store only; and GET
// /idempotency/handlers tells their stores apart. Before, the admin API told
// stores apart by kind and URL alone: it answered from the last provisioned
// handler's store, "not found" for the other's keys.
func TestCaddyAdminTellsStoresOnOneServerApart(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs Caddy; skipped under -short")
	}
	bin := caddyBinary(t)
	t.Run("redis prefixes", func(t *testing.T) {
		adminTellsStoresApart(t, bin, "redis "+redistest.Start(t).URL(), "prefix %s:")
	})
	t.Run("postgres tables", func(t *testing.T) {
		adminTellsStoresApart(t, bin, "postgres "+pgtest.Start(t).URL(), "table idem_%s")
	})
}

func adminTellsStoresApart(t *testing.T, bin, store, setting string) {
	reset := testutil.NewRawUpstream(t, "reset") // reads the request, then resets: outcome unknown
	dir := t.TempDir()
	handler := func(name string) string {
		return fmt.Sprintf("\t\tidempotency /%s/* {\n\t\t\tname %s\n\t\t\tstore %s {\n\t\t\t\t%s\n\t\t\t}\n\t\t}\n", name, name, store, fmt.Sprintf(setting, name))
	}
	p := startCaddy(t, bin, dir, globalOptions(dir)+":0 {\n\troute {\n"+handler("a")+handler("b")+
		fmt.Sprintf("\t\treverse_proxy %s\n\t}\n}\n", reset.Addr()))
	if r := p.Post(t, "/a/charges", "k-a", "x"); r.Status != 502 || !strings.Contains(r.Body, "outcome-unknown") {
		t.Fatalf("handler a: %d %s; want the held outcome-unknown answer", r.Status, r.Body)
	}
	if code, body := admin(t, dir, "GET", "/idempotency/keys?state=held", "", ""); code != 400 || !strings.Contains(body, "?handler=NAME") {
		t.Errorf("held keys without ?handler=: %d %s; want 400 asking for one (two stores)", code, body)
	}
	code, body := admin(t, dir, "GET", "/idempotency/keys?state=held&handler=a", "", "")
	var page adminkeys.HeldPage
	if code != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Held) != 1 {
		t.Fatalf("held keys of handler a: %d %s; want its one key", code, body)
	}
	hash := page.Held[0].KeyHash
	if code, body := admin(t, dir, "GET", "/idempotency/keys?state=held&handler=b", "", ""); code != 200 || !strings.Contains(body, `"held": []`) {
		t.Errorf("held keys of handler b: %d %s; want none", code, body)
	}
	if code, body := admin(t, dir, "GET", "/idempotency/keys?hash="+hash, "", ""); code != 400 || !strings.Contains(body, "?handler=NAME") {
		t.Errorf("a's key without ?handler=: %d %s; want 400 asking for one", code, body)
	}
	if code, body := admin(t, dir, "GET", "/idempotency/keys?hash="+hash+"&handler=b", "", ""); code != 404 {
		t.Errorf("a's key in b's store: %d %s; want 404", code, body)
	}
	if code, body := admin(t, dir, "POST", "/idempotency/release?hash="+hash+"&handler=a", "application/json", ""); code != 200 || !strings.Contains(body, `"released": true`) {
		t.Errorf("releasing a's key through handler a: %d %s", code, body)
	}
	code, body = admin(t, dir, "GET", "/idempotency/handlers", "", "")
	var list []struct{ Name, Store string }
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list) != 2 || list[0].Store == list[1].Store {
		t.Errorf("GET /idempotency/handlers: %d %s; want two handlers whose stores differ", code, body)
	}
}
