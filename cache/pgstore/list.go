package pgstore

// Listing for operators (cache.Lister).

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemproxy/idemproxy/cache"
)

var _ cache.Lister = (*Store)(nil)

// heldIndex names the partial index of the held unknown outcomes and the
// locks (schemaSQL): <table>_held.
func heldIndex(tableParts []string) string {
	return pgx.Identifier{tableParts[len(tableParts)-1] + "_held"}.Sanitize()
}

func (s *Store) tableIdent() string { return pgx.Identifier(strings.Split(s.table, ".")).Sanitize() }

// List implements cache.Lister, in the order of the keys; the cursor is the
// last key of the page (hex). A held listing reads the partial index
// <table>_held (key WHERE unknown OR state = 1), which holds the stored
// unknown outcomes and the locks only (those in flight and those lapsed), so
// a page costs an index range scan of about q.Limit entries plus the locks
// in flight among them, however many records the table holds. A listing by
// prefix reads the primary key's range of that prefix. Either way, each
// record listed is then read as Get reads it.
func (s *Store) List(ctx context.Context, q cache.ListQuery) (cache.ListPage, error) {
	var after []byte
	if q.Cursor != "" {
		b, err := hex.DecodeString(q.Cursor)
		if err != nil || len(b) == 0 {
			return cache.ListPage{}, fmt.Errorf("pgstore: %w", cache.ErrBadCursor)
		}
		after = b
	}
	limit := q.ListLimit()
	sql, args := s.listSQL(q, after, limit+1)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return cache.ListPage{}, fmt.Errorf("pgstore: listing: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return cache.ListPage{}, fmt.Errorf("pgstore: listing: %w", err)
	}
	var page cache.ListPage
	if len(keys) > limit {
		keys = keys[:limit]
		page.Cursor = hex.EncodeToString(keys[limit-1])
	}
	for _, k := range keys {
		rec, err := s.Get(ctx, string(k))
		if err := q.Keep(&page, string(k), rec, err); err != nil {
			return cache.ListPage{}, err
		}
	}
	return page, nil
}

// listSQL is the statement that lists the keys of a page: at most n, after
// the key after (if any).
func (s *Store) listSQL(q cache.ListQuery, after []byte, n int) (string, []any) {
	now := fmt.Sprintf(nowSQL, 1)
	sql := "SELECT key FROM " + s.tableIdent() + " WHERE expires_at > " + now
	args := []any{s.nowArg()}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Held {
		// Implies the partial index's predicate, so the planner may read it.
		sql += " AND (unknown OR state = 1) AND (unknown OR (lease_until IS NOT NULL AND lease_until <= " + now + "))"
	}
	if q.Prefix != "" {
		sql += " AND key >= " + arg([]byte(q.Prefix))
		if hi := prefixEnd([]byte(q.Prefix)); hi != nil {
			sql += " AND key < " + arg(hi)
		}
	}
	if after != nil {
		sql += " AND key > " + arg(after)
	}
	sql += " ORDER BY key LIMIT " + arg(n)
	return sql, args
}

// prefixEnd is the least byte string greater than every string that begins
// with p, or nil when there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
