package memstore

// Listing for operators (cache.Lister): the held unknown outcomes, and the
// records a key hash's digits name.

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/idemproxy/idemproxy/cache"
)

var _ cache.Lister = (*Store)(nil)

// unknownMark is how an encoded response that is a held unknown outcome
// says so (the "u" field, true): a response without these bytes is not one,
// so a held listing decodes only the few that have them.
var unknownMark = []byte("\xa1u\xc3")

// List implements cache.Lister. Records are listed in the order of their
// keys; the cursor is the last key of the page. Each page reads every record,
// one shard at a time under its lock (the keys and expiry of every record; the
// encoded response only of those that may be held): its cost grows with the
// store, about 50 ms per 100,000 records of 200-byte bodies on a small
// machine (BenchmarkListHeld), a shard at a time: that shard's requests wait
// for its part, a 64th.
//
// A key of 64 lowercase hex digits (the middleware's) is listed as given;
// any other key as the hex SHA-256 digest the store keeps of it.
func (s *Store) List(ctx context.Context, q cache.ListQuery) (cache.ListPage, error) {
	var after ikey
	hasAfter := q.Cursor != ""
	if hasAfter {
		b, err := hex.DecodeString(q.Cursor)
		if err != nil || len(b) != len(after) {
			return cache.ListPage{}, fmt.Errorf("memstore: %w", cache.ErrBadCursor)
		}
		copy(after[:], b)
	}
	match := newKeyPrefix(q.Prefix)
	limit := q.ListLimit()
	type found struct {
		k   ikey
		rec *cache.Record // a claim's, or nil: decode e
		e   entry
		rc  replayCount // e's
	}
	var page []found
	keep := func(f found) {
		page = append(page, f)
		if len(page) > 2*limit { // keep the smallest keys only
			slices.SortFunc(page, func(a, b found) int { return bytes.Compare(a.k[:], b.k[:]) })
			page = page[:limit+1] // one more tells a next page exists
		}
	}
	wanted := func(k *ikey) bool {
		return match.matches(k) && (!hasAfter || bytes.Compare(k[:], after[:]) > 0)
	}
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return cache.ListPage{}, err
		}
		sh := &s.shards[i]
		now := s.now().UnixNano()
		sh.mu.Lock()
		for k, l := range sh.locks {
			if l.expires <= now || !wanted(&k) {
				continue
			}
			switch {
			case l.lapsed(now):
				keep(found{k: k, rec: l.lapsedRecord(false)})
			case !q.Held:
				keep(found{k: k, rec: l.record()})
			}
		}
		for _, pos := range sh.index {
			e := sh.entryAt(pos)
			if e.expires() <= now || !wanted(e.key()) {
				continue
			}
			if q.Held && !bytes.Contains(e[entryHeader+e.fpLen():], unknownMark) {
				continue
			}
			keep(found{k: *e.key(), e: e, rc: s.replaysLocked(sh, e)}) // entries are never written again: decoded below, unlocked
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(page, func(a, b found) int { return bytes.Compare(a.k[:], b.k[:]) })
	more := len(page) > limit
	page = page[:min(len(page), limit)]
	out := cache.ListPage{Records: make([]cache.Listed, 0, len(page))}
	for _, f := range page {
		rec := f.rec
		if rec == nil {
			var err error
			if rec, err = f.e.record(); err != nil {
				return cache.ListPage{}, err
			}
			f.rc.fill(rec)
			if q.Held && !cache.IsHeld(rec) {
				continue // the mark's bytes were in a body or header
			}
		}
		out.Records = append(out.Records, cache.Listed{Key: hex.EncodeToString(f.k[:]), Record: rec})
	}
	if more {
		out.Cursor = hex.EncodeToString(page[len(page)-1].k[:])
	}
	return out, nil
}

// keyPrefix matches keys by the leading hex digits of their listed form.
type keyPrefix struct {
	whole []byte // the complete bytes the digits give
	half  int    // the high nibble of the next byte, or -1
	none  bool   // the prefix is not hex: no key lists with it
}

func newKeyPrefix(p string) keyPrefix {
	kp := keyPrefix{half: -1}
	if len(p) > 2*len(ikey{}) {
		return keyPrefix{none: true}
	}
	b, err := hex.DecodeString(p[:len(p)&^1])
	if err != nil {
		return keyPrefix{none: true}
	}
	kp.whole = b
	if len(p)%2 == 1 {
		v := unhexTable[p[len(p)-1]]
		if v > 0xf {
			return keyPrefix{none: true}
		}
		kp.half = int(v)
	}
	for i := 0; i < len(p); i++ { // hex.DecodeString takes upper case; listed keys are lower
		if c := p[i]; c >= 'A' && c <= 'F' {
			return keyPrefix{none: true}
		}
	}
	return kp
}

func (p keyPrefix) matches(k *ikey) bool {
	if p.none {
		return false
	}
	if !bytes.HasPrefix(k[:], p.whole) {
		return false
	}
	return p.half < 0 || int(k[len(p.whole)]>>4) == p.half
}
