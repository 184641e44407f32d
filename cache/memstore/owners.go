package memstore

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// ownerID is 64 bits of seeded hash of a cache.Claim's Owner: what a claim and a
// log entry keep of it. Two owners sharing an id (a 2^-64 accident) would only
// share one share of the store.
type ownerID uint64

var ownerSeed = maphash.MakeSeed()

func ownerOf(owner string) ownerID { return ownerID(maphash.String(ownerSeed, owner)) }

// usage is what one owner holds: its records (in-flight claims and completed
// records) and their bytes (a claim's size; a completed record's log entry and
// index slot), plus ownerBytes for its row in the table.
type usage struct {
	records, bytes int64
}

// ownerStripes spreads the owner table over independently locked parts, so
// shards working for different owners rarely meet on one mutex.
const ownerStripes = 64

// owners is the per-owner table: what every owner with at least one record
// holds, and how many such owners there are.
type owners struct {
	stripes [ownerStripes]struct {
		mu sync.Mutex
		m  map[ownerID]usage
		_  [40]byte // a cache line per stripe
	}
	active atomic.Int64
}

func (t *owners) init() {
	for i := range t.stripes {
		t.stripes[i].m = make(map[ownerID]usage)
	}
}

// add changes id's usage by records and bytes. An owner's row is created with
// its first record and removed with its last, and costs ownerBytes, counted in
// its usage; add returns what the rows cost more (ownerBytes, -ownerBytes or
// 0), for the store's byte count.
func (t *owners) add(id ownerID, records, bytes int64) (rowDelta int64) {
	st := &t.stripes[uint64(id)%ownerStripes]
	st.mu.Lock()
	defer st.mu.Unlock()
	u, ok := st.m[id]
	if !ok {
		u.bytes = ownerBytes
		rowDelta = ownerBytes
		t.active.Add(1)
	}
	u.records += records
	u.bytes += bytes
	if u.records <= 0 {
		delete(st.m, id)
		t.active.Add(-1)
		return rowDelta - ownerBytes
	}
	st.m[id] = u
	return rowDelta
}

// get returns id's usage (zero for an owner without records).
func (t *owners) get(id ownerID) usage {
	st := &t.stripes[uint64(id)%ownerStripes]
	st.mu.Lock()
	u := st.m[id]
	st.mu.Unlock()
	return u
}
