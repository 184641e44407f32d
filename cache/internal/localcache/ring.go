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
// anew, at the head). The ring starts small and doubles, moving its live
// entries, until it reaches the cache's size: the process's heap holds about
// what the cache holds, as it did with one object per record, and the GC's
// pacing (which counts the ring as live heap) is not changed by a cache that
// is mostly empty.
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

// minRing is the size a ring starts at (or its max, when smaller).
const minRing = 64 << 10

// ring is the cache's entries (guarded by Cache.mu). Entries are contiguous:
// one that does not fit before the end of buf starts at 0, and the bytes it
// skipped are ignored. Unwrapped, the entries are buf[tail:head]; wrapped, they
// are buf[tail:end] and then buf[:head]. It wraps only once buf is max long.
type ring struct {
	buf     []byte // made at the first write, grown up to max
	max     int64
	seed    maphash.Seed
	index   map[uint64]int64 // hash of a key → where its entry starts
	head    int64
	tail    int64
	end     int64
	wrapped bool
	live    int64 // bytes of the entries index points at
}

func newRing(max int64) ring {
	return ring{max: max, seed: maphash.MakeSeed(), index: map[uint64]int64{}}
}

func (g *ring) hash(key string) uint64 { return maphash.String(g.seed, key) }

func (g *ring) size(at int64) int64 { return int64(binary.LittleEndian.Uint32(g.buf[at+8:])) }

// find returns where key's entry starts, if the ring holds it.
func (g *ring) find(key string) (int64, bool) {
	at, ok := g.index[g.hash(key)]
	if !ok {
		return 0, false
	}
	b := g.buf[at:]
	n := int64(binary.LittleEndian.Uint32(b[12:]))
	if string(b[headerSize:headerSize+n]) != key { // another key of the same hash
		return 0, false
	}
	return at, true
}

func (g *ring) expires(at int64) int64 { return int64(binary.LittleEndian.Uint64(g.buf[at+24:])) }

// drop forgets the entry at at (its bytes stay until the tail passes them).
func (g *ring) drop(at int64) {
	delete(g.index, binary.LittleEndian.Uint64(g.buf[at:]))
	g.live -= g.size(at)
}

// entrySize is the size of an entry of these lengths.
func entrySize(key, fingerprint, resp int) int64 {
	return (int64(headerSize+key+fingerprint+resp) + 7) &^ 7
}

// put writes an entry, replacing key's, evicting the oldest entries to make
// room; it reports false, keeping nothing, for one over an eighth of the ring.
func (g *ring) put(key, fingerprint string, created, recExpires time.Time, resp []byte, expires int64) bool {
	n := entrySize(len(key), len(fingerprint), len(resp))
	if n > g.max/8 || n > 1<<32-1 {
		return false
	}
	h := g.hash(key)
	if at, ok := g.index[h]; ok {
		g.drop(at)
	}
	at := g.alloc(n)
	b := g.buf[at : at+n]
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

// alloc returns where n bytes start, growing the ring or evicting the oldest
// entries until they fit (n is at most an eighth of max).
func (g *ring) alloc(n int64) int64 {
	for {
		if !g.wrapped {
			if g.head+n <= int64(len(g.buf)) {
				at := g.head
				g.head += n
				return at
			}
			if int64(len(g.buf)) < g.max {
				g.grow(n)
				continue
			}
			if g.tail == g.head { // empty: start over at 0
				g.tail, g.head = 0, 0
				continue
			}
			g.wrapped, g.end, g.head = true, g.head, 0
		}
		if g.head+n <= g.tail {
			at := g.head
			g.head += n
			return at
		}
		g.evict()
	}
}

// grow moves the live entries, oldest first, to the start of a ring twice
// as long (at least minRing, room for n more, at most max), leaving out the
// dropped ones.
func (g *ring) grow(n int64) {
	size := min(max(2*int64(len(g.buf)), minRing, g.live+n), g.max)
	nb := make([]byte, size)
	var w int64
	move := func(from, to int64) {
		for at := from; at < to; {
			sz := g.size(at)
			h := binary.LittleEndian.Uint64(g.buf[at:])
			if i, ok := g.index[h]; ok && i == at {
				copy(nb[w:], g.buf[at:at+sz])
				g.index[h] = w
				w += sz
			}
			at += sz
		}
	}
	if g.wrapped {
		move(g.tail, g.end)
		move(0, g.head)
	} else {
		move(g.tail, g.head)
	}
	g.buf, g.tail, g.head, g.end, g.wrapped = nb, 0, w, 0, false
}

// evict passes the tail over the oldest entry (wrapped), forgetting it if it
// is still indexed.
func (g *ring) evict() {
	at := g.tail
	size := g.size(at)
	if i, ok := g.index[binary.LittleEndian.Uint64(g.buf[at:])]; ok && i == at {
		g.drop(at)
	}
	g.tail += size
	if g.tail >= g.end {
		g.tail, g.wrapped = 0, false
	}
}

// clear forgets every entry, and gives back the ring's memory.
func (g *ring) clear() {
	clear(g.index)
	g.buf, g.head, g.tail, g.end, g.wrapped, g.live = nil, 0, 0, 0, false, 0
}

// copyOut returns the record of the entry at at, its strings one copy of
// the entry's bytes (so it stays whole when the ring reuses them), still
// encoded: decode it, outside the cache's lock, with kept.record.
func (g *ring) copyOut(at int64) kept {
	b := g.buf[at:]
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
