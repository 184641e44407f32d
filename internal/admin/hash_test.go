package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/admin"
	"github.com/idemproxy/idemproxy/internal/adminkeys"
)

// Two records whose hashes share the 12 digits the logs print: a lookup by
// them acts on neither and lists both, with their whole hashes, which each
// name one; the held list takes a held key's route from its reconcile job,
// and its hold's start from that route's unknown_hold.
func TestHashLookupAmbiguousAndHeldRoute(t *testing.T) {
	ts := newTestServer(t, time.Hour, "/charges", 2*time.Hour)
	h := admin.Handler(ts)
	a := "3fa9c2d1e0b4" + strings.Repeat("a", 52)
	b := "3fa9c2d1e0b4" + strings.Repeat("b", 52)
	hold(t, ts.store, a, 2*time.Hour)
	hold(t, ts.store, b, time.Hour)
	var amb struct {
		Error   string
		Matches []struct{ Hash, State string }
	}
	if code := adminGet(t, h, "/keys?hash=3fa9c2d1e0b4", &amb); code != http.StatusConflict || len(amb.Matches) != 2 || !strings.Contains(amb.Error, "ambiguous") {
		t.Fatalf("lookup by 12 shared digits: %d %+v", code, amb)
	}
	for _, m := range amb.Matches {
		if (m.Hash != a && m.Hash != b) || m.State != "held" {
			t.Errorf("match %+v", m)
		}
		var rec adminkeys.KeyRecord
		if code := adminGet(t, h, "/keys?hash="+m.Hash, &rec); code != 200 || rec.Response == nil || !rec.Response.Unknown {
			t.Errorf("lookup by the whole hash %s: %d %+v", m.Hash, code, rec)
		}
	}
	var rec adminkeys.KeyRecord
	if code := adminGet(t, h, "/keys?hash=3fa9c2d1e0b4a", &rec); code != 200 {
		t.Errorf("lookup by 13 digits that name one: %d", code)
	}

	var jobs cache.Reconciler = ts.store
	now := time.Now()
	if err := jobs.ScheduleReconcile(context.Background(), a, &cache.Job{Route: "/charges", Method: "GET", URL: "/charges?key=k",
		State: cache.JobExhausted, Attempts: 5, LastStatus: 500, Due: now.Add(time.Hour), Deadline: now, Until: now.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var page adminkeys.HeldPage
	if code := adminGet(t, h, "/keys?state=held&limit=1", &page); code != 200 || len(page.Held) != 1 || page.NextCursor == "" {
		t.Fatalf("first page of 1: %d %+v", code, page)
	}
	first := page.Held[0]
	var rest adminkeys.HeldPage
	if code := adminGet(t, h, "/keys?state=held&limit=1&cursor="+page.NextCursor, &rest); code != 200 || len(rest.Held) != 1 || rest.NextCursor != "" {
		t.Fatalf("second page: %d %+v", code, rest)
	}
	byHash := map[string]adminkeys.HeldKey{first.Hash: first, rest.Held[0].Hash: rest.Held[0]}
	ha, hb := byHash[a], byHash[b]
	if ha.Route != "/charges" || ha.Reconcile == nil || ha.Reconcile.State != "exhausted" || ha.Reconcile.Attempts != 5 || ha.Reconcile.LastStatus != 500 {
		t.Errorf("held key with a job: %+v (job %+v)", ha, ha.Reconcile)
	}
	if got := ha.HeldUntil.Sub(ha.HeldSince); got != 2*time.Hour {
		t.Errorf("held since is held until less %v, want the route's unknown_hold 2h", got)
	}
	if hb.Route != "" || hb.Reconcile != nil || hb.HeldUntil.Sub(hb.HeldSince) != time.Hour || hb.KeyHash != "3fa9c2d1e0b4" || hb.Kind != "no_answer" || hb.Status != 504 {
		t.Errorf("held key without a job: %+v", hb)
	}
	if code := adminGet(t, h, "/keys?state=held&cursor=nonsense", nil); code != http.StatusBadRequest {
		t.Errorf("a foreign cursor: %d, want 400", code)
	}
	if code := adminGet(t, h, "/keys?state=done", nil); code != http.StatusBadRequest {
		t.Errorf("state=done: %d, want 400", code)
	}
}
