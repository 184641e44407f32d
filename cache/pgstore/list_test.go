package pgstore_test

import (
	"context"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
)

// TestHeldListingReadsBoundedPages: with many completed records and few held
// ones (stored unknown outcomes, and claims that lapsed), a held
// listing reads the primary key, pgstore.HeldScan rows a page, never the
// whole table; following its cursors lists every held record once, and
// nothing else. A listing by prefix reads the primary key's range.
func TestHeldListingReadsBoundedPages(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	s := mustNew(t, pool, pgstore.Options{Table: "idem_listed", SweepInterval: -1})
	ctx := context.Background()
	const rows = 100000
	unknown, err := cache.EncodeResponse(&cache.Response{Status: 504, Unknown: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO idem_listed (key, state, token, fingerprint, created_at, expires_at, unknown, lease_until, response)
		SELECT convert_to(md5(i::text) || md5((-i)::text), 'UTF8'), CASE WHEN i % 1500 = 7 OR i % 700 = 3 THEN 1 ELSE 2 END, '\x00', '\x00', now(),
			now() + interval '1 day', i % 1000 = 0, CASE WHEN i % 1500 = 7 THEN now() - interval '1 minute' WHEN i % 700 = 3 THEN now() + interval '1 minute' END,
			CASE WHEN i % 1500 = 7 OR i % 700 = 3 THEN NULL ELSE $2::bytea END
		FROM generate_series(1, $1::int) AS i`, rows, unknown)
	if err == nil {
		_, err = pool.Exec(ctx, "ANALYZE idem_listed")
	}
	if err != nil {
		t.Fatal(err)
	}
	var want []string // the unknown outcomes (whose response is not decoded: listed by key only) and the lapsed claims
	if err := pool.QueryRow(ctx, `SELECT array_agg(encode(key, 'escape') ORDER BY key) FROM idem_listed WHERE unknown OR (state = 1 AND lease_until < now())`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		q     cache.ListQuery
		index string
	}{
		{cache.ListQuery{Held: true}, "idem_listed_pkey"},
		{cache.ListQuery{Prefix: "3fa9c2d1e0b4"}, "idem_listed_pkey"},
	} {
		sql, args := pgstore.ListSQL(s, tc.q)
		rows, err := pool.Query(ctx, "EXPLAIN "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		if p := strings.Join(plan, "\n"); !strings.Contains(p, tc.index) || strings.Contains(p, "Seq Scan") {
			t.Errorf("listing %+v: plan\n%s\nwant a scan of %s", tc.q, p, tc.index)
		}
	}
	var got []string
	q := cache.ListQuery{Held: true, Limit: 5}
	pages := 0
	for {
		page, err := s.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, l := range page.Records {
			got = append(got, l.Key)
		}
		if page.Cursor == "" {
			break
		}
		if _, err := hex.DecodeString(page.Cursor); err != nil || pages > 200 {
			t.Fatalf("page %d: cursor %q", pages, page.Cursor)
		}
		q.Cursor = page.Cursor
	}
	if !slices.Equal(got, want) {
		t.Fatalf("held listing over %d pages: %d keys, want %d (%v…)", pages, len(got), len(want), want[:3])
	}
	if min := max(len(want)/5, rows/pgstore.HeldScan); pages < min {
		t.Fatalf("held listing: %d pages, want at least %d (5 records, or %d rows read, a page)", pages, min, pgstore.HeldScan)
	}
}
