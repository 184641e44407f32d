package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// What the previous version ran, verbatim but for the table's name: its DDL
// (what its New applies at every start) and the statements of an instance
// still running it during a rolling upgrade.
const (
	earlierDDL = `CREATE TABLE IF NOT EXISTS "old" (
	key         bytea       PRIMARY KEY,
	state       smallint    NOT NULL,
	token       bytea       NOT NULL,
	fingerprint bytea       NOT NULL,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,
	unknown     boolean     NOT NULL DEFAULT false,
	response    bytea,
	waited      boolean     NOT NULL DEFAULT false,
	lease_until timestamptz,
	found_by    bytea
);
CREATE INDEX IF NOT EXISTS "old_expires_at" ON "old" (expires_at);
CREATE INDEX IF NOT EXISTS "old_held" ON "old" (key) WHERE unknown OR state = 1;
`
	// $1 key, $2 token, $3 fingerprint, $4 lease ms, $5 now, $6 trace context, $7 hold ms.
	earlierClaim = `WITH c AS (SELECT coalesce($5::timestamptz, statement_timestamp()) AS now),
cur AS (SELECT r.state, r.token = $2 AS mine, r.fingerprint, r.created_at, r.expires_at, r.response,
	coalesce(r.lease_until, r.expires_at) AS lease_until FROM "old" r WHERE r.key = $1),
ins AS (
	INSERT INTO "old" (key, state, token, fingerprint, created_at, expires_at, unknown, response, lease_until)
	SELECT $1, 1, $2, $3, c.now, c.now + ($4::bigint + $7::bigint) * interval '1 millisecond', false, $6::bytea,
		c.now + $4::bigint * interval '1 millisecond' FROM c
	WHERE NOT EXISTS (SELECT 1 FROM cur)
	ON CONFLICT (key) DO NOTHING
	RETURNING 1
)
SELECT 0::smallint, 0::smallint, ''::bytea, c.now, c.now, NULL::bytea, c.now FROM ins, c
UNION ALL
SELECT CASE WHEN cur.expires_at <= c.now THEN 2 WHEN cur.state = 1 AND cur.lease_until <= c.now THEN 3
		WHEN cur.state = 1 AND cur.mine THEN 0 ELSE 1 END::smallint,
	cur.state, cur.fingerprint, cur.created_at, CASE WHEN cur.state = 1 THEN cur.lease_until ELSE cur.expires_at END,
	cur.response, c.now FROM cur, c`
	// $1 key, $2 token, $3 response, $4 unknown, $5 ttl ms, $6 now, $7 channel.
	earlierComplete = `WITH c AS (SELECT coalesce($6::timestamptz, statement_timestamp()) AS now),
up AS (UPDATE "old" r SET state = 2, response = $3, unknown = $4, expires_at = c.now + $5::bigint * interval '1 millisecond'
	FROM c WHERE r.key = $1 AND r.state = 1 AND r.token = $2 AND r.expires_at > c.now
	RETURNING r.waited),
n AS (SELECT pg_notify($7, encode($1, 'hex')) FROM up WHERE up.waited)
SELECT EXISTS (SELECT 1 FROM up), (SELECT count(*) FROM n)`
	// $1 batch size, $2 now.
	earlierSweep = `DELETE FROM "old" WHERE key IN (
	SELECT key FROM "old" WHERE expires_at <= coalesce($2::timestamptz, statement_timestamp()) ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	// $1 now.
	earlierHeld = `SELECT key FROM "old" WHERE expires_at > coalesce($1::timestamptz, statement_timestamp())
	AND (unknown OR state = 1) AND (unknown OR (lease_until IS NOT NULL AND lease_until <= coalesce($1::timestamptz, statement_timestamp()))) ORDER BY key LIMIT 101`
)

// earlier is an instance of the previous version on the table "old", with
// its own clock.
type earlier struct {
	t    *testing.T
	pool *pgxpool.Pool
	now  func() time.Time
}

func (e earlier) claim(key, tok string, lease, hold time.Duration) {
	e.t.Helper()
	var outcome int16
	var skip [6]any
	if err := e.pool.QueryRow(context.Background(), earlierClaim, []byte(key), []byte(tok), []byte("f"), lease.Milliseconds(), e.now(), nil, hold.Milliseconds()).
		Scan(&outcome, &skip[0], &skip[1], &skip[2], &skip[3], &skip[4], &skip[5]); err != nil || outcome != 0 {
		e.t.Fatalf("earlier claim of %s: outcome %d, %v", key, outcome, err)
	}
}

func (e earlier) complete(key, tok string, ttl time.Duration) {
	e.t.Helper()
	blob, err := cache.EncodeResponse(&cache.Response{Status: 201, Body: []byte("done")})
	if err != nil {
		e.t.Fatal(err)
	}
	var ok bool
	var n int64
	if err := e.pool.QueryRow(context.Background(), earlierComplete, []byte(key), []byte(tok), blob, false, ttl.Milliseconds(), e.now(), "idemproxy_old").Scan(&ok, &n); err != nil || !ok {
		e.t.Fatalf("earlier complete of %s: %v, %v", key, ok, err)
	}
}

func (e earlier) sweep() int64 {
	e.t.Helper()
	tag, err := e.pool.Exec(context.Background(), earlierSweep, 1000, e.now())
	if err != nil {
		e.t.Fatalf("earlier sweep: %v", err)
	}
	return tag.RowsAffected()
}

func (e earlier) held() []string {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), earlierHeld, e.now())
	if err != nil {
		e.t.Fatalf("earlier held listing: %v", err)
	}
	var keys []string
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			e.t.Fatal(err)
		}
		keys = append(keys, string(k))
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return keys
}

// clock is a settable time for both versions.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestUpgradeFromEarlierVersion: New brings a table of the previous version
// up to date (sweep_at, its index, the fillfactor; the indexes on expires_at
// and the held rows dropped) with its rows; the sweep deletes the rows an
// instance of the previous version wrote, before and after, once they
// expire, and looks at a live one once more, at its expiry; such an instance
// keeps working on the table (claim, complete, its sweep, its held listing,
// its start-up DDL, which creates its indexes again until the next start of
// this version); and the completions of this version are HOT updates there.
func TestUpgradeFromEarlierVersion(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)}
	old := earlier{t: t, pool: pool, now: clk.Now}
	if _, err := pool.Exec(ctx, earlierDDL); err != nil {
		t.Fatal(err)
	}
	old.claim("done", "t1", time.Minute, 0)
	old.complete("done", "t1", time.Hour)
	old.claim("brief", "t2", time.Minute, 0)
	old.complete("brief", "t2", time.Second)
	old.claim("lapsing", "t3", time.Minute, time.Hour) // its instance dies: held from the claim's end for an hour

	if _, err := pgstore.New(ctx, pool, pgstore.Options{Table: "old", SkipCreateSchema: true}); err == nil || !strings.Contains(err.Error(), "idemproxy migrate") {
		t.Fatalf("New without creating the schema on the earlier table: %v, want an error naming idemproxy migrate", err)
	}
	s := mustNew(t, pool, pgstore.Options{Table: "old", SweepInterval: -1, Now: clk.Now})
	indexes := func() string {
		t.Helper()
		var names string
		if err := pool.QueryRow(ctx, `SELECT string_agg(indexrelid::regclass::text, ' ' ORDER BY indexrelid::regclass::text) FROM pg_index WHERE indrelid = 'old'::regclass`).Scan(&names); err != nil {
			t.Fatal(err)
		}
		return names
	}
	var options []string
	if err := pool.QueryRow(ctx, `SELECT reloptions FROM pg_class WHERE oid = 'old'::regclass`).Scan(&options); err != nil {
		t.Fatal(err)
	}
	if got, ff := indexes(), fmt.Sprint("fillfactor=", pgstore.Fillfactor); got != "old_pkey old_sweep_at" || strings.Join(options, ",") != ff {
		t.Fatalf("after New: indexes %q, options %v; want old_pkey old_sweep_at, %s", got, options, ff)
	}
	if rec, err := s.Get(ctx, "done"); err != nil || rec.State != cache.StateCompleted {
		t.Fatalf("a record of the earlier version: %+v, %v", rec, err)
	}

	// The earlier instance goes on during the rolling upgrade.
	old.claim("later", "t4", time.Minute, 0)
	old.complete("later", "t4", 2*time.Hour)
	if n := old.sweep(); n != 0 {
		t.Fatalf("earlier sweep deleted %d live rows", n)
	}
	clk.Add(2 * time.Minute) // brief expired; lapsing's claim lapsed, held
	if got := old.held(); strings.Join(got, ",") != "lapsing" {
		t.Fatalf("earlier held listing: %q, want lapsing", got)
	}
	page, err := s.List(ctx, cache.ListQuery{Held: true})
	if err != nil || len(page.Records) != 1 || page.Records[0].Key != "lapsing" {
		t.Fatalf("held listing: %+v, %v; want lapsing", page, err)
	}
	// The rows that were there before New read sweep_at as the latest
	// expiry among them (lapsing's): the sweep leaves them until then. Later,
	// written with sweep_at -infinity, is looked at once and moved to its
	// expiry.
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want nothing deleted yet", n, err)
	}
	sweepAt := func() map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT convert_from(key, 'UTF8'), CASE WHEN sweep_at = expires_at THEN 'expiry' ELSE to_char(sweep_at AT TIME ZONE 'UTC', 'HH24:MI:SS') END FROM old`)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			m[k] = v
		}
		return m
	}
	if got, want := sweepAt(), map[string]string{"done": "11:01:00", "brief": "11:01:00", "lapsing": "expiry", "later": "expiry"}; !maps.Equal(got, want) {
		t.Fatalf("sweep_at after the first sweep: %v, want %v", got, want)
	}
	if _, err := s.Get(ctx, "brief"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("brief, expired: %v", err)
	}
	clk.Add(time.Hour) // lapsing's hold and done's TTL ended
	if n, err := s.Sweep(ctx); err != nil || n != 3 {
		t.Fatalf("Sweep = %d, %v; want brief, done and lapsing deleted", n, err)
	}
	if n := old.sweep(); n != 0 {
		t.Fatalf("earlier sweep deleted %d rows, want none (later is live)", n)
	}
	clk.Add(time.Hour) // later expired
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want later deleted", n, err)
	}

	// An instance of the earlier version starting again creates its indexes
	// again; the next start of this version drops them.
	if _, err := pool.Exec(ctx, earlierDDL); err != nil {
		t.Fatalf("the earlier version's start-up DDL on the new table: %v", err)
	}
	if got := indexes(); got != "old_expires_at old_held old_pkey old_sweep_at" {
		t.Fatalf("after the earlier start: %q", got)
	}
	s = mustNew(t, pool, pgstore.Options{Table: "old", SweepInterval: -1, Now: clk.Now})
	if got := indexes(); got != "old_pkey old_sweep_at" {
		t.Fatalf("after New again: %q", got)
	}
	upd0, hot0 := updates(t, pool, "old", 0)
	for _, key := range []string{"n1", "n2", "n3", "n4", "n5"} {
		if _, loaded, err := s.ClaimOrGet(ctx, key, hotLock("tok-"+key)); err != nil || loaded {
			t.Fatalf("claim %s: %v %v", key, loaded, err)
		}
		if err := s.Complete(ctx, key, "tok-"+key, &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, 24*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if upd, hot := updates(t, pool, "old", upd0+5); upd-upd0 != 5 || hot-hot0 != 5 {
		t.Fatalf("5 completions on the upgraded table: %d updates, %d HOT", upd-upd0, hot-hot0)
	}
}

// Dropping the earlier indexes takes the table's exclusive lock, which a
// transaction holding the table (a pg_dump) keeps from being granted:
// start-up gives up after a moment and says why, keeping the index on
// sweep_at it built (which needs no exclusive lock), and the next start,
// once the table is free, drops them.
func TestDroppingTheEarlierIndexesWaitsBriefly(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, earlierDDL); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE old ADD COLUMN sweep_at timestamptz NOT NULL DEFAULT '-infinity',
		ADD COLUMN info bytea, ADD COLUMN replays bigint NOT NULL DEFAULT 0, ADD COLUMN last_replay timestamptz`); err != nil {
		t.Fatal(err)
	}
	dump, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dump.Rollback(ctx)
	if _, err := dump.Exec(ctx, `SELECT count(*) FROM old`); err != nil { // holds ACCESS SHARE until it ends
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err = pgstore.New(ctx, pool, pgstore.Options{Table: "old"})
	if err == nil || !strings.Contains(err.Error(), "dropping the indexes") || !strings.Contains(err.Error(), "idemproxy migrate") {
		t.Fatalf("start-up with the table held: %v, want an error about dropping the indexes, naming idemproxy migrate", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("start-up waited %v", d)
	}
	var names string
	list := `SELECT string_agg(indexrelid::regclass::text, ' ' ORDER BY indexrelid::regclass::text) FROM pg_index WHERE indrelid = 'old'::regclass`
	if err := pool.QueryRow(ctx, list).Scan(&names); err != nil || names != "old_expires_at old_held old_pkey old_sweep_at" {
		t.Fatalf("indexes after the failed start: %q (%v), want the index on sweep_at built, the earlier ones kept", names, err)
	}
	if err := dump.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	mustNew(t, pool, pgstore.Options{Table: "old"})
	if err := pool.QueryRow(ctx, list).Scan(&names); err != nil || names != "old_pkey old_sweep_at" {
		t.Fatalf("indexes after the next start: %q (%v)", names, err)
	}
}

// `idemproxy migrate --apply` (Settings.Migrate) brings a table of the
// previous version up to date as New does, and applying it again changes
// nothing.
func TestMigrateAppliesTheUpgrade(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, earlierDDL); err != nil {
		t.Fatal(err)
	}
	settings := pgstore.DefaultSettings()
	settings.Table = "old"
	for range 2 {
		if ready, err := settings.Migrate(ctx, srv.URL(), cache.Env{}); err != nil || ready != "table old" {
			t.Fatalf("Migrate: %q, %v", ready, err)
		}
		var names string
		if err := pool.QueryRow(ctx, `SELECT string_agg(indexrelid::regclass::text, ' ' ORDER BY indexrelid::regclass::text) FROM pg_index WHERE indrelid = 'old'::regclass`).Scan(&names); err != nil || names != "old_pkey old_sweep_at" {
			t.Fatalf("indexes after Migrate: %q (%v)", names, err)
		}
	}
	mustNew(t, pool, pgstore.Options{Table: "old", SkipCreateSchema: true})
}
