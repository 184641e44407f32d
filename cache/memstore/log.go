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
}

// dropIndexLocked forgets k's completed record; its entry becomes a hole in
// the log, reclaimed when the head passes it.
func (s *Store) dropIndexLocked(sh *shard, k *ikey) {
	sh.waiters.Notify(*k)
	delete(sh.index, s.prefixOf(k))
	s.records.Add(-1)
	s.bytes.Add(-indexBytes)
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

// entryAt returns the entry at pos, which must be a position in the log.
func (sh *shard) entryAt(pos uint64) entry {
	i := sort.Search(len(sh.log), func(i int) bool { return sh.log[i].base > pos }) - 1
	c := &sh.log[i]
	off := pos - c.base
	n := uint64(entry(c.buf[off:]).size())
	return entry(c.buf[off : off+n : off+n])
}

// appendLocked reserves n bytes at the end of sh's log and returns their position.
func (s *Store) appendLocked(sh *shard, n int) (uint64, []byte) {
	if len(sh.log) > 0 {
		c := &sh.log[len(sh.log)-1]
		if used := len(c.buf); cap(c.buf)-used >= n {
			c.buf = c.buf[:used+n]
			return c.base + uint64(used), c.buf[used : used+n]
		}
	}
	size := max(s.chunkSize, n)
	c := chunk{base: sh.next, buf: make([]byte, n, size)}
	if len(sh.log) == 0 {
		sh.head = c.base
	}
	sh.next += uint64(size)
	sh.log = append(sh.log, c)
	s.bytes.Add(int64(size))
	return c.base, c.buf
}

// popHeadLocked reclaims the entry at the head of sh's log, evicting its record
// if it is still indexed there, unless it is keep's record. It reports whether
// it reclaimed anything.
func (s *Store) popHeadLocked(sh *shard, keep *ikey) bool {
	if len(sh.log) == 0 {
		return false
	}
	e := sh.entryAt(sh.head)
	k := *e.key()
	if pos, ok := sh.index[s.prefixOf(&k)]; ok && pos == sh.head {
		if keep != nil && k == *keep {
			return false
		}
		s.dropIndexLocked(sh, &k)
	}
	sh.head += uint64(e.size())
	s.trimLocked(sh)
	return true
}

// trimLocked drops the chunks the head has passed.
func (s *Store) trimLocked(sh *shard) {
	for len(sh.log) > 0 {
		c := &sh.log[0]
		if sh.head < c.base+uint64(len(c.buf)) {
			return
		}
		s.bytes.Add(-int64(cap(c.buf)))
		sh.log[0] = chunk{}
		sh.log = sh.log[1:]
		if len(sh.log) > 0 {
			sh.head = sh.log[0].base
		} else {
			sh.log = nil
		}
	}
}

// entry is one completed record in a shard's log, laid out as
//
//	size u32 | fingerprint length u32 | created i64 | expires i64 | key [32] | token hash u64 | fingerprint | encoded response
//
// (entryHeader bytes before the fingerprint). Entries are never written again
// once appended and chunks are never reused, so reading one needs no lock.
type entry []byte

func (e entry) size() uint32       { return binary.LittleEndian.Uint32(e[0:]) }
func (e entry) fpLen() uint32      { return binary.LittleEndian.Uint32(e[4:]) }
func (e entry) created() int64     { return int64(binary.LittleEndian.Uint64(e[8:])) }
func (e entry) expires() int64     { return int64(binary.LittleEndian.Uint64(e[16:])) }
func (e entry) key() *ikey         { return (*ikey)(e[24:56]) }
func (e entry) isKey(k *ikey) bool { return *e.key() == *k }
func (e entry) tokenHash() uint64  { return binary.LittleEndian.Uint64(e[56:]) }

// tokenHash identifies the token that completed a record, so a re-sent Complete
// is recognised. 64 bits: a different token matching would be a 2^-64 accident,
// and would only make a late Complete answer success without writing anything.
func tokenHash(token string) uint64 { return maphash.String(tokenSeed, token) }

var tokenSeed = maphash.MakeSeed()

// write fills a freshly reserved entry of len(e) bytes.
func (e entry) write(k *ikey, tokHash uint64, fingerprint string, created, expires int64, response []byte) {
	binary.LittleEndian.PutUint32(e[0:], uint32(len(e)))
	binary.LittleEndian.PutUint32(e[4:], uint32(len(fingerprint)))
	binary.LittleEndian.PutUint64(e[8:], uint64(created))
	binary.LittleEndian.PutUint64(e[16:], uint64(expires))
	copy(e[24:56], k[:])
	binary.LittleEndian.PutUint64(e[56:], tokHash)
	copy(e[entryHeader:], fingerprint)
	copy(e[entryHeader+len(fingerprint):], response)
}

// record decodes the entry.
func (e entry) record() (*cache.Record, error) {
	fpLen := e.fpLen()
	if entryHeader+uint64(fpLen) > uint64(len(e)) {
		return nil, fmt.Errorf("memstore: %w: entry of %d bytes with a %d-byte fingerprint", cache.ErrCorrupt, len(e), fpLen)
	}
	resp, err := cache.DecodeResponse(e[entryHeader+fpLen:])
	if err != nil {
		return nil, err
	}
	return &cache.Record{
		Version:     cache.FormatVersion,
		State:       cache.StateCompleted,
		Fingerprint: string(e[entryHeader : entryHeader+fpLen]),
		CreatedAt:   time.Unix(0, e.created()),
		ExpiresAt:   time.Unix(0, e.expires()),
		Response:    resp,
	}, nil
}
