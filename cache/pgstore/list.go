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

// HeldScan is how many rows a held listing reads per page, in the order of
// the primary key: no index holds the held rows alone (one would hold a column
// the completion changes, which would then not be a HOT update), so a page
// costs the same however few are held, and a listing of every page reads the
// table once. Measured in docs/stores.md.
const HeldScan = 10000

func (s *Store) tableIdent() string { return pgx.Identifier(strings.Split(s.table, ".")).Sanitize() }

// List implements cache.Lister, in the order of the keys; the cursor is the
// last key read (hex). A listing by prefix reads the primary key's range of
// that prefix, about q.Limit entries a page; a held listing reads HeldScan
// rows a page (of the prefix's range, if any) and keeps those held, so a
// page may be empty and still have a next one. Either way, each record
// listed is then read as Get reads it.
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
	var (
		keys  [][]byte
		last  []byte // the last key read
		total int64  // how many rows a held listing read
	)
	for rows.Next() {
		var (
			key  []byte
			keep = true
		)
		dest := []any{&key}
		if q.Held {
			dest = append(dest, &keep, &total)
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return cache.ListPage{}, fmt.Errorf("pgstore: listing: %w", err)
		}
		if keep {
			keys = append(keys, key)
		}
		last = key
	}
	if err := rows.Err(); err != nil {
		return cache.ListPage{}, fmt.Errorf("pgstore: listing: %w", err)
	}
	var page cache.ListPage
	switch {
	case len(keys) > limit:
		keys = keys[:limit]
		page.Cursor = hex.EncodeToString(keys[limit-1])
	case q.Held && total == HeldScan:
		page.Cursor = hex.EncodeToString(last)
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
// the key after (if any). A held listing's answers (key, held, rows read):
// the held rows among the first HeldScan after the key after, and the last
// row read.
func (s *Store) listSQL(q cache.ListQuery, after []byte, n int) (string, []any) {
	now := fmt.Sprintf(nowSQL, 1)
	args := []any{s.nowArg()}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	var where []string
	if !q.Held {
		where = append(where, "expires_at > "+now)
	}
	if q.Prefix != "" {
		where = append(where, "key >= "+arg([]byte(q.Prefix)))
		if hi := prefixEnd([]byte(q.Prefix)); hi != nil {
			where = append(where, "key < "+arg(hi))
		}
	}
	if after != nil {
		where = append(where, "key > "+arg(after))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	if !q.Held {
		return "SELECT key FROM " + s.tableIdent() + cond + " ORDER BY key LIMIT " + arg(n), args
	}
	return `WITH r AS (SELECT key, expires_at > ` + now + ` AND (unknown OR (state = 1 AND lease_until IS NOT NULL AND lease_until <= ` + now + `)) AS held
	FROM ` + s.tableIdent() + cond + ` ORDER BY key LIMIT ` + arg(HeldScan) + `),
n AS (SELECT key, held, row_number() OVER (ORDER BY key) AS i, count(*) OVER () AS total FROM r)
SELECT key, held, total FROM n WHERE held OR i = total ORDER BY key`, args
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
