package dynamostore

// A large response's chunks go to one partition (their pk is the store key),
// which takes about 1 MB a second: a Complete of several MB can fail part-way
// (throttled past its tries, a request timing out), and the middleware calls
// Complete again with the same token and response. The chunk keys are the
// same then (the version is a digest of the token and the encoded response,
// which encodes to the same bytes each time), so the next call writes only the
// chunks the failed one did not: the store remembers, in memory, which chunks
// of each unfinished set DynamoDB confirmed.
//
// Memory, not a read of the table: the retries of a Complete run in the
// process that holds the response (nothing else knows its token), and reading
// which chunks exist would cost as much as writing them (DynamoDB charges a
// read for the whole item, whatever it projects). An entry is dropped once its
// set is complete, before any record names it: from then on the chunks may be
// deleted with a record (a Delete, a Resolve, a claim after the record
// lapsed), and a set some record named is always written whole. Chunks no
// record names are deleted by nobody but the call that wrote them (on
// ErrClaimLost, and then the entry is gone too) and by their time to live.

import (
	"sync"
	"time"
)

const (
	// unfinishedMax bounds the sets remembered; the oldest goes first.
	unfinishedMax = 64
	// unfinishedAge bounds how long a set is resumed: its chunks' time to
	// live was set from the first call's expiry, and must outlast the
	// record the last call writes (chunkGrace past the first's).
	unfinishedAge = chunkGrace / 2
)

// unfinished are the chunk sets a failed Complete left part-written, by store
// key and version.
type unfinished struct {
	mu sync.Mutex
	m  map[string]*progress
}

// progress is which chunks of a set DynamoDB confirmed.
type progress struct {
	since   time.Time // when its first call began
	written []bool
}

func (p *progress) count() int {
	n := 0
	for _, w := range p.written {
		if w {
			n++
		}
	}
	return n
}

// take removes and returns the progress of set id, of n chunks, for a call
// starting at now: a fresh one when none is remembered, or when the one
// remembered is too old to resume or is not of n chunks.
func (u *unfinished) take(id string, n int, now time.Time) *progress {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.m[id]
	delete(u.m, id)
	if p == nil || len(p.written) != n || now.Sub(p.since) > unfinishedAge || now.Before(p.since) {
		return &progress{since: now, written: make([]bool, n)}
	}
	return p
}

// keep remembers p as set id's progress, dropping the oldest set when full.
func (u *unfinished) keep(id string, p *progress) {
	if p.count() == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]*progress{}
	}
	if len(u.m) >= unfinishedMax {
		var oldest string
		for k, q := range u.m {
			if oldest == "" || q.since.Before(u.m[oldest].since) {
				oldest = k
			}
		}
		delete(u.m, oldest)
	}
	u.m[id] = p
}
