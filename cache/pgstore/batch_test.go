package pgstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
)

// A statement that fails rolls its batch back: every other statement of the
// batch runs again on its own and answers as if alone; the failing one gets
// its own error.
func TestBatchFailureRerunsAlone(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE batched (k text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	b := newBatcher(pool, 1)
	defer b.close()
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sql := "INSERT INTO batched VALUES ($1) RETURNING k"
			if i == n/2 {
				sql = "SELECT ($1::text || (1/0)::text)" // division by zero
			}
			errs[i] = b.run(ctx, fmt.Sprint(i), sql, []any{fmt.Sprint("k", i)}, &got[i])
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		switch {
		case i == n/2:
			if errs[i] == nil || !strings.Contains(errs[i].Error(), "division by zero") {
				t.Errorf("the failing statement: %v", errs[i])
			}
		case errs[i] != nil || got[i] != fmt.Sprint("k", i):
			t.Errorf("statement %d: %q, %v", i, got[i], errs[i])
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM batched").Scan(&rows); err != nil || rows != n-1 {
		t.Fatalf("%d rows (%v), want %d: each good statement exactly once", rows, err, n-1)
	}
}
