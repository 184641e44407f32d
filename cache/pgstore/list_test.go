package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/internal/pgtest"
)

// TestHeldListingReadsTheHeldIndex: with many completed records and few held
// ones, a held listing reads the partial index <table>_held, not the table,
// and a listing by prefix the primary key's range.
func TestHeldListingReadsTheHeldIndex(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	s := mustNew(t, pool, pgstore.WithTable("idem_listed"))
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO idem_listed (key, state, token, fingerprint, created_at, expires_at, unknown)
		SELECT convert_to(md5(i::text) || md5((-i)::text), 'UTF8'), 2, '\x00', '\x00', now(), now() + interval '1 day', i % 1000 = 0
		FROM generate_series(1, 20000) AS i;
		ANALYZE idem_listed`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		q     cache.ListQuery
		index string
	}{
		{cache.ListQuery{Held: true}, "idem_listed_held"},
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
}
