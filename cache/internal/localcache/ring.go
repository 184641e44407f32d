package localcache

import (
	"encoding/binary"
	"hash/maphash"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// The cache's entries live in one byte ring, and its index maps a key's hash
// to where its entry starts: neither holds a pointer, so the garbage collector
// neither scans nor marks a kept record (with an entry, a list element and
// three strings per record, as a container/list LRU holds them, a full 64 MiB
// cache cost a Redis first execution about 10 µs of the GC's work). A record
// is written once, where the ring's head is, and is never changed there; the
// oldest kept is the first out (a record read again from the store is kept
// anew, at the head). The ring is eight segments (at most maxSegment each,
// so more of a huge one), each made when the head first enters it: the
// process's heap holds about what the cache holds, to an eighth, and nothing
// is ever moved (a ring grown by copying would stall every claim behind its
// lock while it copied).
//
// An entry is a header and its bytes, padded to 8:
//
//	0  hash of the key        uint64
//	8  size of the entry      uint32 (header, bytes and padding)
//	12 key length             uint32
//	16 fingerprint length     uint32
//	20 response length        uint32
//	24 expires                int64 (ns since the cache's start)
//	32 created                int64 (Unix s)
//	40 the record's ExpiresAt int64 (Unix s)
//	48 created                uint32 (ns within the second)
//	52 the record's ExpiresAt uint32 (ns within the second)
//	56 flags                  byte (timeFlags, created and ExpiresAt)
//	64 key, fingerprint, response (encoded, cache.EncodeResponse)
//
// A time is kept as Unix seconds and nanoseconds, not Unix ns, which an int64
// holds only from 1678 to 2262 (a ttl of a few centuries is a valid one).
const headerSize = 64

// timeFlags say how a record's time was kept: zero (and so its Unix time
// meaningless), or in UTC rather than the local time zone; a time in any other
// zone comes back the same instant in the local one.
const (
	createdZero = 1 << iota
	createdUTC
	expiresZero
	expiresUTC
)

// maxSegment bounds a segment, and so an entry.
const maxSegment = 8 << 20

// ring is the cache's entries (guarded by Cache.mu), at offsets in [0, max)
// cut into segments of seg bytes (the last may be shorter). An entry lies
// within one segment: one that does not fit before the segment's end starts
// the next (or, from the last, the first), and the bytes it skipped, from
// fill[s] to the segment's end, hold no entry. Unwrapped, the entries lie from
// tail to head; wrapped (the head came round to the first segment), from tail
// to max and then from 0 to head.
type ring struct {
	segs    [][]byte // made in order, as the head first enters each
	fill    []int64  // per segment: where its entries end, set as the head leaves it
	seg     int64
	max     int64
	seed    maphash.Seed
	index   map[uint64]int64 // hash of a key → where its entry starts
	head    int64
	tail    int64
	wrapped bool
	live    int64 // bytes of the entries index points at
}

func newRing(bound int64) ring {
	seg := min(max(((bound+7)/8+7)&^7, 8), maxSegment)
	return ring{max: bound, seg: seg, seed: maphash.MakeSeed(), index: map[uint64]int64{}}
}

func (g *ring) hash(key string) uint64 { return maphash.String(g.seed, key) }

// bytes returns the ring from at to the end of at's segment.
func (g *ring) bytes(at int64) []byte {
	s := at / g.seg
	return g.segs[s][at-s*g.seg:]
}

// segEnd is where the segment holding at ends.
func (g *ring) segEnd(at int64) int64 { return min((at/g.seg+1)*g.seg, g.max) }

func (g *ring) size(at int64) int64 { return int64(binary.LittleEndian.Uint32(g.bytes(at)[8:])) }

// find returns where key's entry starts, if the ring holds it.
func (g *ring) find(key string) (int64, bool) { return g.findHashed(key, g.hash(key)) }

// findHashed is find of key, whose hash is h.
func (g *ring) findHashed(key string, h uint64) (int64, bool) {
	at, ok := g.index[h]
	if !ok {
		return 0, false
	}
	b := g.bytes(at)
	n := int64(binary.LittleEndian.Uint32(b[12:]))
	if string(b[headerSize:headerSize+n]) != key { // another key of the same hash
		return 0, false
	}
	return at, true
}

func (g *ring) expires(at int64) int64 { return int64(binary.LittleEndian.Uint64(g.bytes(at)[24:])) }

// drop forgets the entry at at (its bytes stay until the tail passes them).
func (g *ring) drop(at int64) {
	delete(g.index, binary.LittleEndian.Uint64(g.bytes(at)))
	g.live -= g.size(at)
}

// entrySize is the size of an entry of these lengths.
func entrySize(key, fingerprint, resp int) int64 {
	return (int64(headerSize+key+fingerprint+resp) + 7) &^ 7
}

// put writes an entry, replacing key's, evicting the oldest entries to make
// room; it reports false, keeping nothing (and no older entry of key), for one
// over an eighth of the ring (or over maxSegment).
func (g *ring) put(key, fingerprint string, created, recExpires time.Time, resp []byte, expires int64) bool {
	h := g.hash(key)
	if at, ok := g.findHashed(key, h); ok { // a record refused below leaves no older one kept
		g.drop(at)
	}
	n := entrySize(len(key), len(fingerprint), len(resp))
	if n > g.max/8 || n > g.seg {
		return false
	}
	if at, ok := g.index[h]; ok { // another key of the same hash
		g.drop(at)
	}
	at := g.alloc(n)
	b := g.bytes(at)[:n]
	binary.LittleEndian.PutUint64(b, h)
	binary.LittleEndian.PutUint32(b[8:], uint32(n))
	binary.LittleEndian.PutUint32(b[12:], uint32(len(key)))
	binary.LittleEndian.PutUint32(b[16:], uint32(len(fingerprint)))
	binary.LittleEndian.PutUint32(b[20:], uint32(len(resp)))
	binary.LittleEndian.PutUint64(b[24:], uint64(expires))
	var flags byte
	flags |= putTime(b[32:], b[48:], created, createdZero, createdUTC)
	flags |= putTime(b[40:], b[52:], recExpires, expiresZero, expiresUTC)
	b[56] = flags
	p := headerSize
	p += copy(b[p:], key)
	p += copy(b[p:], fingerprint)
	copy(b[p:], resp)
	g.index[h] = at
	g.live += n
	return true
}

func putTime(sec, nsec []byte, t time.Time, zero, utc byte) byte {
	if t.IsZero() {
		return zero
	}
	binary.LittleEndian.PutUint64(sec, uint64(t.Unix()))
	binary.LittleEndian.PutUint32(nsec, uint32(t.Nanosecond()))
	if t.Location() == time.UTC {
		return utc
	}
	return 0
}

func getTime(sec, nsec []byte, flags, zero, utc byte) time.Time {
	if flags&zero != 0 {
		return time.Time{}
	}
	t := time.Unix(int64(binary.LittleEndian.Uint64(sec)), int64(binary.LittleEndian.Uint32(nsec)))
	if flags&utc != 0 {
		return t.UTC()
	}
	return t
}

// alloc returns where n bytes start (n is at most a segment), making the
// head's segment or evicting the oldest entries until they fit.
func (g *ring) alloc(n int64) int64 {
	for {
		end := g.segEnd(g.head)
		if g.head+n > end { // the head moves to the next segment
			if g.wrapped && g.tail >= g.head && g.tail < end {
				g.evict() // the oldest entries lie ahead in this segment
				continue
			}
			if !g.wrapped && g.tail == g.head { // empty: start over at 0
				g.tail, g.head = 0, 0
				if g.head+n <= g.segEnd(0) {
					continue
				}
			}
			g.leave(end)
			continue
		}
		if s := g.head / g.seg; s == int64(len(g.segs)) {
			g.segs = append(g.segs, make([]byte, end-s*g.seg))
		}
		if !g.wrapped || g.head+n <= g.tail {
			at := g.head
			if g.head += n; g.head == end {
				g.leave(end)
			}
			return at
		}
		g.evict()
	}
}

// leave moves the head from its segment, whose entries end where it is, to
// the start of the next, end (or of the first, from the last).
func (g *ring) leave(end int64) {
	s := g.head / g.seg
	if g.head == end {
		s = (end - 1) / g.seg
	}
	for int64(len(g.fill)) <= s {
		g.fill = append(g.fill, 0)
	}
	g.fill[s] = g.head
	g.head = end
	if g.head == g.max {
		g.head, g.wrapped = 0, true
	}
}

// evict passes the tail over the oldest entry (wrapped), forgetting it if it
// is still indexed, and on to the next segment where its segment's end.
func (g *ring) evict() {
	at := g.tail
	if s := at / g.seg; s < int64(len(g.fill)) && at < g.fill[s] {
		size := g.size(at)
		if i, ok := g.index[binary.LittleEndian.Uint64(g.bytes(at))]; ok && i == at {
			g.drop(at)
		}
		g.tail += size
		if g.tail < g.fill[s] {
			return
		}
	}
	g.tail = g.segEnd(at)
	if g.tail == g.max {
		g.tail, g.wrapped = 0, false
	}
}

// clear forgets every entry, and gives back the ring's memory.
func (g *ring) clear() {
	clear(g.index)
	g.segs, g.fill, g.head, g.tail, g.wrapped, g.live = nil, nil, 0, 0, false, 0
}

// copyOut returns the record of the entry at at, its strings one copy of
// the entry's bytes (so it stays whole when the ring reuses them), still
// encoded: decode it, outside the cache's lock, with kept.record.
func (g *ring) copyOut(at int64) kept {
	b := g.bytes(at)
	kn := int(binary.LittleEndian.Uint32(b[12:]))
	fn := int(binary.LittleEndian.Uint32(b[16:]))
	rn := int(binary.LittleEndian.Uint32(b[20:]))
	s := string(b[headerSize+kn : headerSize+kn+fn+rn])
	flags := b[56]
	return kept{fingerprint: s[:fn], resp: s[fn:],
		created:    getTime(b[32:], b[48:], flags, createdZero, createdUTC),
		recExpires: getTime(b[40:], b[52:], flags, expiresZero, expiresUTC)}
}

// kept is a record copied out of the ring, its response still encoded.
type kept struct {
	fingerprint, resp   string
	created, recExpires time.Time
}

// record decodes k into a record of the caller's own.
func (k kept) record() (*cache.Record, bool) {
	rr := new(struct {
		rec  cache.Record
		resp cache.Response
	})
	if err := cache.DecodeResponseStringInto(&rr.resp, k.resp); err != nil {
		return nil, false
	}
	rr.rec = cache.Record{Version: cache.FormatVersion, State: cache.StateCompleted, Fingerprint: k.fingerprint,
		CreatedAt: k.created, ExpiresAt: k.recExpires, Response: &rr.resp}
	return &rr.rec, true
}
