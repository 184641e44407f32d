package pgstore

import "github.com/idemproxy/idemproxy/cache"

// ListSQL is the statement List runs for q's first page.
func ListSQL(s *Store, q cache.ListQuery) (string, []any) { return s.listSQL(q, nil, q.ListLimit()+1) }

// Channel is the LISTEN/NOTIFY channel of s's table.
func Channel(s *Store) string { return s.channel }
