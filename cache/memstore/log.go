package memstore

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sort"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

type chunk struct {
	base uint64
	buf  []byte // len: bytes written; entries never span chunks
	live int    // bytes of the entries indexed (the rest of len(buf) are holes)
}

// indexLocked indexes the entry e, written at pos, as its key's record.
func (s *Store) indexLocked(sh *shard, pos uint64, e entry) {
	sh.index[s.prefixOf(e.key())] = pos
	sh.log[sh.chunkOf(pos)].live += len(e)
}

// unindexLocked makes the indexed entry e a hole (its key's slot is dropped
// or about to point elsewhere).
func (s *Store) unindexLocked(sh *shard, e entry) {
	p := s.prefixOf(e.key())
	sh.log[sh.chunkOf(sh.index[p])].live -= len(e)
	delete(sh.index, p)
}

// dropIndexLocked forgets the completed record e, which must be indexed; its
// entry becomes a hole in the log, reclaimed when the head passes it or its
// chunk is compacted.
func (s *Store) dropIndexLocked(sh *shard, e entry) {
	sh.waiters.Notify(*e.key())
	if sh.replays != nil {
		delete(sh.replays, s.prefixOf(e.key()))
	}
	s.unindexLocked(sh, e)
	s.records.Add(-1)
	s.bytes.Add(-indexBytes + s.owners.add(e.owner(), -1, -e.cost()))
}

// chunkOf returns the index in sh.log of the chunk holding pos.
func (sh *shard) chunkOf(pos uint64) int {
	return sort.Search(len(sh.log), func(i int) bool { return sh.log[i].base > pos }) - 1
}

// lookupLocked returns the log entry of k's completed record, or nil.
func (s *Store) lookupLocked(sh *shard, k *ikey) entry {
	pos, ok := sh.index[s.prefixOf(k)]
	if !ok {
		return nil
	}
	e := sh.entryAt(pos)
	if !e.isKey(k) {
		return nil // another key with the same prefix
	}
	return e
}

// indexedAt reports whether e, at pos, is a record (not a hole).
func (s *Store) indexedAt(sh *shard, pos uint64, e entry) bool {
	p, ok := sh.index[s.prefixOf(e.key())]
	return ok && p == pos
}

// entryAt returns the entry at pos, which must be a position in the log.
func (sh *shard) entryAt(pos uint64) entry {
	return sh.log[sh.chunkOf(pos)].entryAt(pos)
}

func (c *chunk) entryAt(pos uint64) entry {
	off := pos - c.base
	n := uint64(entry(c.buf[off:]).size())
	return entry(c.buf[off : off+n : off+n])
}

// end returns the position after the last entry written to sh's log.
func (sh *shard) end() uint64 {
	if len(sh.log) == 0 {
		return sh.next
	}
	c := &sh.log[len(sh.log)-1]
	return c.base + uint64(len(c.buf))
}

// newChunkFor returns the capacity of the chunk an entry of n bytes needs: 0
// when it fits in the last chunk, else a chunk of the usual size or of its own.
func (s *Store) newChunkFor(sh *shard, n int) int {
	if len(sh.log) > 0 {
		if c := &sh.log[len(sh.log)-1]; cap(c.buf)-len(c.buf) >= n {
			return 0
		}
	}
	return max(s.chunkSize, n)
}

// appendLocked reserves n bytes at the end of sh's log and returns their
// position: in the last chunk when newCap is 0 (newChunkFor said it fits),
// else in a new chunk of capacity newCap. The caller accounts for the chunk.
func (s *Store) appendLocked(sh *shard, n, newCap int) (uint64, []byte) {
	if newCap == 0 {
		c := &sh.log[len(sh.log)-1]
		used := len(c.buf)
		c.buf = c.buf[:used+n]
		return c.base + uint64(used), c.buf[used : used+n]
	}
	c := chunk{base: sh.next, buf: make([]byte, n, newCap)}
	if len(sh.log) == 0 {
		sh.head = c.base
	}
	sh.next += uint64(newCap)
	sh.log = append(sh.log, c)
	return c.base, c.buf
}

// popHeadLocked moves the head past the entry there, whose record the caller
// dropped or moved, and frees the chunks the head has passed.
func (s *Store) popHeadLocked(sh *shard, e entry) {
	sh.head += uint64(e.size())
	s.trimLocked(sh)
}

// trimLocked drops the chunks the head has passed.
func (s *Store) trimLocked(sh *shard) {
	for len(sh.log) > 0 {
		c := &sh.log[0]
		if sh.head < c.base+uint64(len(c.buf)) {
			return
		}
		s.bytes.Add(-int64(sh.dropFirstChunk()))
	}
}

// removeChunk removes the chunk at i from the log, whose records the caller
// dropped or moved, and returns the capacity it held (the caller accounts for
// it). Only the first chunk's removal moves the head.
func (sh *shard) removeChunk(i int) int {
	if i == 0 {
		return sh.dropFirstChunk()
	}
	n := cap(sh.log[i].buf)
	copy(sh.log[i:], sh.log[i+1:])
	sh.log[len(sh.log)-1] = chunk{}
	sh.log = sh.log[:len(sh.log)-1]
	return n
}

// dropFirstChunk removes the log's first chunk, moving the head to the next
// one, and returns the capacity it held (the caller accounts for it).
func (sh *shard) dropFirstChunk() int {
	n := cap(sh.log[0].buf)
	sh.log[0] = chunk{}
	sh.log = sh.log[1:]
	if len(sh.log) > 0 {
		sh.head = sh.log[0].base
	} else {
		sh.log = nil
	}
	return n
}

// entry is one completed record in a shard's log, laid out as
//
//	size u32 | fingerprint length u32 | created i64 | expires i64 | key [32] | token hash u64 | owner u64 | fingerprint | encoded response
//
// (entryHeader bytes before the fingerprint). Entries are never written again
// once appended and chunks are never reused, so reading one needs no claim.
type entry []byte

func (e entry) size() uint32       { return binary.LittleEndian.Uint32(e[0:]) }
func (e entry) fpLen() uint32      { return binary.LittleEndian.Uint32(e[4:]) }
func (e entry) created() int64     { return int64(binary.LittleEndian.Uint64(e[8:])) }
func (e entry) expires() int64     { return int64(binary.LittleEndian.Uint64(e[16:])) }
func (e entry) key() *ikey         { return (*ikey)(e[24:56]) }
func (e entry) isKey(k *ikey) bool { return *e.key() == *k }
func (e entry) tokenHash() uint64  { return binary.LittleEndian.Uint64(e[56:]) }
func (e entry) owner() ownerID     { return ownerID(binary.LittleEndian.Uint64(e[64:])) }

// cost is what a completed record counts in its owner's usage: its entry and
// its index slot.
func (e entry) cost() int64 { return int64(len(e)) + indexBytes }

// tokenHash identifies the token that completed a record, so a re-sent Complete
// is recognised. 64 bits: a different token matching would be a 2^-64 accident,
// and would only make a late Complete answer success without writing anything.
func tokenHash(token string) uint64 { return maphash.String(tokenSeed, token) }

var tokenSeed = maphash.MakeSeed()

// write fills a freshly reserved entry of len(e) bytes.
func (e entry) write(k *ikey, tokHash uint64, owner ownerID, fingerprint string, created, expires int64, response []byte) {
	binary.LittleEndian.PutUint32(e[0:], uint32(len(e)))
	binary.LittleEndian.PutUint32(e[4:], uint32(len(fingerprint)))
	binary.LittleEndian.PutUint64(e[8:], uint64(created))
	binary.LittleEndian.PutUint64(e[16:], uint64(expires))
	copy(e[24:56], k[:])
	binary.LittleEndian.PutUint64(e[56:], tokHash)
	binary.LittleEndian.PutUint64(e[64:], uint64(owner))
	copy(e[entryHeader:], fingerprint)
	copy(e[entryHeader+len(fingerprint):], response)
}

// record decodes the entry.
func (e entry) record() (*cache.Record, error) {
	fpLen := e.fpLen()
	if entryHeader+uint64(fpLen) > uint64(len(e)) {
		return nil, fmt.Errorf("memstore: %w: entry of %d bytes with a %d-byte fingerprint", cache.ErrCorrupt, len(e), fpLen)
	}
	// One copy of the fingerprint and the response (their strings are cut
	// from it), and one allocation for the record and its response.
	s := string(e[entryHeader:])
	rr := new(struct {
		rec  cache.Record
		resp cache.Response
	})
	if err := cache.DecodeResponseStringInto(&rr.resp, s[fpLen:]); err != nil {
		return nil, err
	}
	rr.rec = cache.Record{
		Version:     cache.FormatVersion,
		State:       cache.StateCompleted,
		Fingerprint: s[:fpLen],
		CreatedAt:   time.Unix(0, e.created()),
		ExpiresAt:   time.Unix(0, e.expires()),
		Response:    &rr.resp,
	}
	return &rr.rec, nil
}
