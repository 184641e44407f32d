package memstore

import "fmt"

// ForceIndexCollisions makes every key share one index slot, so tests can reach
// the path a 128-bit prefix collision takes.
func ForceIndexCollisions(s *Store) { s.collideForTest = true }

// CheckInvariants recomputes, from the shards' locks, indexes and logs, what
// the store's counts and owner table must say, and returns the first
// difference: records, bytes (chunk capacities, index slots, locks and owner
// rows, exactly), every owner's records and bytes, the active owners; and the
// log's shape (chunks in order, the head inside the first, entries chaining to
// each chunk's end, every index slot on an entry of its key).
func CheckInvariants(s *Store) error {
	for i := range s.shards {
		s.shards[i].mu.Lock()
		defer s.shards[i].mu.Unlock()
	}
	for i := range s.owners.stripes {
		s.owners.stripes[i].mu.Lock()
		defer s.owners.stripes[i].mu.Unlock()
	}
	var records, bytes int64
	want := map[ownerID]usage{}
	for si := range s.shards {
		sh := &s.shards[si]
		indexed := 0
		for i, c := range sh.log {
			if i > 0 && c.base < sh.log[i-1].base+uint64(cap(sh.log[i-1].buf)) {
				return fmt.Errorf("shard %d: chunk %d at %d overlaps the one before", si, i, c.base)
			}
			if len(c.buf) == 0 {
				return fmt.Errorf("shard %d: chunk %d is empty", si, i)
			}
			pos := c.base
			if i == 0 {
				if sh.head < c.base || sh.head >= c.base+uint64(len(c.buf)) {
					return fmt.Errorf("shard %d: head %d outside its first chunk [%d, %d)", si, sh.head, c.base, c.base+uint64(len(c.buf)))
				}
				pos = sh.head
			}
			live := 0
			for end := c.base + uint64(len(c.buf)); pos < end; {
				e := c.entryAt(pos)
				if len(e) < entryHeader || pos+uint64(len(e)) > end {
					return fmt.Errorf("shard %d: entry at %d of %d bytes runs past its chunk", si, pos, len(e))
				}
				if s.indexedAt(sh, pos, e) {
					indexed++
					live += len(e)
					u := want[e.owner()]
					u.records++
					u.bytes += e.cost()
					want[e.owner()] = u
				}
				pos += uint64(len(e))
			}
			if live != c.live {
				return fmt.Errorf("shard %d: chunk %d counts %d live bytes, holds %d", si, i, c.live, live)
			}
			bytes += int64(cap(c.buf))
		}
		if indexed != len(sh.index) {
			return fmt.Errorf("shard %d: %d index slots, %d of them on a live entry of their key", si, len(sh.index), indexed)
		}
		records += int64(len(sh.index) + len(sh.locks))
		bytes += int64(len(sh.index)) * indexBytes
		for _, l := range sh.locks {
			bytes += l.size()
			u := want[l.owner]
			u.records++
			u.bytes += l.size()
			want[l.owner] = u
		}
	}
	bytes += int64(len(want)) * ownerBytes
	if got := s.records.Load(); got != records {
		return fmt.Errorf("records counted %d, held %d", got, records)
	}
	if got := s.bytes.Load(); got != bytes {
		return fmt.Errorf("bytes counted %d, held %d", got, bytes)
	}
	if got := s.owners.active.Load(); got != int64(len(want)) {
		return fmt.Errorf("active owners counted %d, holding records %d", got, len(want))
	}
	rows := 0
	for i := range s.owners.stripes {
		for id, u := range s.owners.stripes[i].m {
			rows++
			w := want[id]
			if u.records != w.records || u.bytes != w.bytes+ownerBytes {
				return fmt.Errorf("owner %x counted %d records, %d bytes; holds %d records, %d bytes (+%d for its row)", id, u.records, u.bytes, w.records, w.bytes, ownerBytes)
			}
		}
	}
	if rows != len(want) {
		return fmt.Errorf("%d owner rows, %d owners holding records", rows, len(want))
	}
	return nil
}

// Usage returns what owner (a cache.Claim's Owner) holds: records and bytes.
func Usage(s *Store, owner string) (records, bytes int64) {
	u := s.owners.get(ownerOf(owner))
	return u.records, u.bytes
}

// Chunks returns the number of log chunks of every shard together.
func Chunks(s *Store) int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].log)
		s.shards[i].mu.Unlock()
	}
	return n
}
