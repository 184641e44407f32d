package pgstore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
)

// BenchmarkFillfactor: the share of completions that are HOT updates
// (hot-%), and the heap each record takes (heap-B/op), by response body
// (random text, which does not compress) and the table's fillfactor, for
// first executions by 8 workers, batched. What chose pgstore.Fillfactor:
//
//	go test -run '^$' -bench Fillfactor -benchtime 4000x ./cache/pgstore
func BenchmarkFillfactor(b *testing.B) {
	pool := pgtest.Start(b).Pool()
	ctx := context.Background()
	for _, size := range []int{100, 500, 1000, 1500, 2500} {
		for _, ff := range []int{100, 90, 80, 70, 60} {
			b.Run(fmt.Sprintf("body=%d/fillfactor=%d", size, ff), func(b *testing.B) {
				table := fmt.Sprintf("ff_%d_%d_%d", ff, size, b.N)
				ddl, err := pgstore.Schema(table)
				if err != nil {
					b.Fatal(err)
				}
				ddl = strings.Replace(ddl, fmt.Sprint("fillfactor = ", pgstore.Fillfactor), fmt.Sprint("fillfactor = ", ff), 1) // CREATE TABLE's
				if _, err := pool.Exec(ctx, ddl); err != nil {
					b.Fatal(err)
				}
				s := mustNew(b, pool, pgstore.Options{Table: table, SweepInterval: -1}) // keeps the table's fillfactor
				var sb strings.Builder
				for sb.Len() < size {
					sb.WriteString(rand.Text())
				}
				rec := &cache.Record{Fingerprint: strings.Repeat("f", 64), Response: &cache.Response{Status: 201,
					Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(sb.String()[:size])}}
				b.ResetTimer()
				errs := make(chan error, 8)
				for w := range 8 {
					go func() {
						for i := w; i < b.N; i += 8 {
							key, tok := fmt.Sprintf("%064x", i*7919), rand.Text()
							lock := cache.Claim{Token: tok, Fingerprint: rec.Fingerprint, Duration: 30 * time.Second, Hold: 24 * time.Hour, TTL: 24 * time.Hour}
							if _, _, err := s.ClaimOrGet(ctx, key, lock); err != nil {
								errs <- err
								return
							}
							if err := s.Complete(ctx, key, tok, rec, 24*time.Hour); err != nil {
								errs <- err
								return
							}
						}
						errs <- nil
					}()
				}
				for range 8 {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				upd, hot := updates(b, pool, table, int64(b.N))
				var heap float64
				if err := pool.QueryRow(ctx, "SELECT pg_table_size($1::regclass)", table).Scan(&heap); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(100*float64(hot)/float64(max(upd, 1)), "hot-%")
				b.ReportMetric(heap/float64(b.N), "heap-B/op")
			})
		}
	}
}

// BenchmarkMillion: a table of the previous version with a million records
// (355 MB; 1 in 1,500 a lapsed claim, 1 in 10,000 an unknown outcome), then
// New's migration (migrate-ms), the first sweep (sweep-ms: the rows that
// were there are looked at once all have expired, so nothing yet), and a held
// listing followed to its end (held-page-ms, held-all-ms). Run it alone
// (inserting the rows takes 15-25 s):
//
//	go test -run '^$' -bench Million -benchtime 1x ./cache/pgstore
func BenchmarkMillion(b *testing.B) {
	pool := pgtest.Start(b).Pool()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, strings.ReplaceAll(earlierDDL, `"old"`, `"million"`)); err != nil {
		b.Fatal(err)
	}
	unknown, err := cache.EncodeResponse(&cache.Response{Status: 504, Unknown: true})
	if err != nil {
		b.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO million (key, state, token, fingerprint, created_at, expires_at, unknown, lease_until, response)
		SELECT convert_to(encode(sha256(i::text::bytea), 'hex'), 'UTF8'), CASE WHEN i % 1500 = 7 THEN 1 ELSE 2 END, '\x0123456789abcdef0123456789abcdef',
			convert_to(encode(sha256((-i)::text::bytea), 'hex'), 'UTF8'), now(), now() + (i % 86400) * interval '1 second' + interval '1 minute', i % 10000 = 0,
			CASE WHEN i % 1500 = 7 THEN now() - interval '1 minute' ELSE now() END,
			CASE WHEN i % 1500 = 7 THEN NULL ELSE $1::bytea || decode(repeat(md5(i::text), 8), 'hex') END
		FROM generate_series(1, 1000000) AS i`, unknown)
	if err == nil {
		_, err = pool.Exec(ctx, "VACUUM ANALYZE million")
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		s := mustNew(b, pool, pgstore.Options{Table: "million", SweepInterval: -1})
		b.ReportMetric(float64(time.Since(t0).Milliseconds()), "migrate-ms")
		t0 = time.Now()
		if _, err := s.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "sweep-ms")
		q := cache.ListQuery{Held: true}
		pages, held := 0, 0
		t0 = time.Now()
		for {
			page, err := s.List(ctx, q)
			if err != nil {
				b.Fatal(err)
			}
			pages++
			held += len(page.Records)
			if page.Cursor == "" {
				break
			}
			q.Cursor = page.Cursor
		}
		all := time.Since(t0)
		if held != 767 {
			b.Fatalf("held listing: %d records, want 767", held)
		}
		b.ReportMetric(float64(all.Milliseconds()), "held-all-ms")
		b.ReportMetric(float64(all.Milliseconds())/float64(pages), "held-page-ms")
	}
}
