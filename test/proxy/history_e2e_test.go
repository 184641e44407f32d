package proxy_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/internal/adminkeys"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// `idemproxy keys get` shows which request a record is (method, path,
// request id, client, first seen), how often it was replayed, and what held
// and settled it: an operator chooses release or resolve without the logs.
func TestE2EKeysGetShowsRequestAndHistory(t *testing.T) {
	skipShort(t)
	up := testutil.NewRawUpstream(t, "ok")
	p := start(t, "--upstream", "http://"+up.Addr())
	get := func(key string) adminkeys.KeyRecord {
		t.Helper()
		code, out := runBin(t, "keys", "get", key, "--admin", p.Admin, "--host", "api.example")
		var rec adminkeys.KeyRecord
		if code != 0 || json.Unmarshal([]byte(out), &rec) != nil {
			t.Fatalf("keys get %s: exit %d\n%s", key, code, out)
		}
		if rec.Request == nil || rec.Request.Method != "POST" || rec.Request.Path != "/charges" ||
			rec.Request.RequestID == "" || !strings.HasPrefix(rec.Request.Client, "127.0.0.1") || rec.Request.FirstSeen.IsZero() {
			t.Fatalf("keys get %s: request %+v\n%s", key, rec.Request, out)
		}
		return rec
	}

	for range 3 {
		p.Post(t, "/charges", "h-replayed", "x")
	}
	if rec := get("h-replayed"); rec.Replays != 2 || rec.LastReplay.IsZero() || len(rec.History) != 0 {
		t.Fatalf("replayed key: %d replays (last %v), history %+v; want 2, none", rec.Replays, rec.LastReplay, rec.History)
	}

	up.Act.Store("reset")
	if r := p.Post(t, "/charges", "h-resolved", "x"); r.Status != 502 {
		t.Fatalf("first answer: %d %s", r.Status, r.Body)
	}
	if rec := get("h-resolved"); len(rec.History) != 1 || rec.History[0].Event != "held" || rec.History[0].By != "no_answer" {
		t.Fatalf("held key: history %+v", rec.History)
	}
	if code, out := runBin(t, "keys", "resolve", "h-resolved", "--status", "201", "--body", "done", "--admin", p.Admin, "--host", "api.example"); code != 0 {
		t.Fatalf("keys resolve: %d %s", code, out)
	}
	if r := p.Post(t, "/charges", "h-resolved", "x"); r.Status != 201 || !r.Replayed {
		t.Fatalf("retry after resolve: %+v", r)
	}
	rec := get("h-resolved")
	if len(rec.History) != 2 || rec.History[1].Event != "resolved" || rec.History[1].By != "operator" || rec.History[1].At.IsZero() || rec.Replays != 1 {
		t.Fatalf("resolved key: history %+v, %d replays", rec.History, rec.Replays)
	}
	// The held list shows the request too.
	up.Act.Store("reset")
	p.Post(t, "/charges", "h-listed", "x")
	code, out := runBin(t, "keys", "list", "--held", "--admin", p.Admin)
	var page adminkeys.HeldPage
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Held) != 1 || page.Held[0].Request == nil ||
		page.Held[0].Request.Path != "/charges" || page.Held[0].Request.RequestID == "" {
		t.Fatalf("keys list --held: exit %d\n%s", code, out)
	}
}
