package cache

import (
	"context"
	"errors"
)

// Lister is implemented by stores that can list their live records for an
// operator: the held unknown outcomes of an incident, or the record a logged
// key hash names. Listing reads through the store's keys (or an index of
// them) page by page; it is an operator's tool, never on a request's path.
// Each store's documentation says what a page costs.
type Lister interface {
	// List returns one page of the live records whose store keys begin with
	// q.Prefix (every record when empty), held unknown outcomes only when
	// q.Held is set, and the cursor of the next page ("" after the last).
	//
	// A page holds about q.Limit records (DefaultListLimit when zero): some
	// stores end a page early or a little past it, and a page may be empty
	// while its cursor is not. Records that exist from the first page to the
	// last are listed; one written or deleted meanwhile may or may not be, and
	// a store may list a record twice (Redis's SCAN may). Order is the
	// store's own. A cursor is opaque, and only valid for the same query on
	// the same store; a malformed one fails with ErrBadCursor.
	List(ctx context.Context, q ListQuery) (ListPage, error)
}

// ListQuery selects the records of a List call.
type ListQuery struct {
	// Prefix restricts the page to store keys that begin with it.
	Prefix string
	// Held restricts the page to held unknown outcomes (IsHeld).
	Held bool
	// Cursor is the previous page's ListPage.Cursor; empty for the first page.
	Cursor string
	// Limit is about how many records a page holds: DefaultListLimit when
	// zero, at most MaxListLimit.
	Limit int
}

// Bounds of ListQuery.Limit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListLimit is q.Limit within its bounds.
func (q ListQuery) ListLimit() int {
	switch {
	case q.Limit <= 0:
		return DefaultListLimit
	case q.Limit > MaxListLimit:
		return MaxListLimit
	}
	return q.Limit
}

// ListPage is one page of a List call.
type ListPage struct {
	Records []Listed
	// Cursor asks for the next page; "" when this one is the last.
	Cursor string
}

// Listed is one record of a page: its store key (as given for keys of 64
// lowercase hex digits, the middleware's; a store may show another key as a
// digest of it) and the record as Get returns it.
type Listed struct {
	Key    string
	Record *Record
}

// Keep appends to page the record Get returned for key, when q keeps it: a
// key gone since Get listed it (ErrNotFound) is skipped, another error is
// returned, and a record that is not held is skipped when q.Held. Every
// store's List reads its records through it, so all filter alike.
func (q ListQuery) Keep(page *ListPage, key string, rec *Record, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return nil // settled or expired since
	case err != nil:
		return err
	case q.Held && !IsHeld(rec):
		return nil
	}
	page.Records = append(page.Records, Listed{Key: key, Record: rec})
	return nil
}

// ErrBadCursor: a List cursor this store did not make.
var ErrBadCursor = errors.New("idempotency list cursor not recognised")

// IsHeld reports whether rec is a held unknown outcome: a completed record
// whose response is one, or a lapsed claim held as one (LapsedRecord).
func IsHeld(rec *Record) bool {
	return rec != nil && rec.State == StateCompleted && rec.Response != nil && rec.Response.Unknown
}
