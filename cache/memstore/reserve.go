package memstore

// Reserving room before it is written, so concurrent writers never pass the
// bounds.

import "sync/atomic"

// tryReserve adds records and bytes to the store's counts if both stay within
// the bounds, and reports whether it did (a change that does not grow a count
// is always made). Growth is reserved this way, before it is written, so
// concurrent writers cannot together pass a bound.
func (s *Store) tryReserve(records, bytes int64) bool {
	if !reserve(&s.records, records, s.maxRecs.Load()) {
		return false
	}
	if !reserve(&s.bytes, bytes, s.maxByte.Load()) {
		s.records.Add(-records)
		return false
	}
	return true
}

// reservation is room a writer reserved and has not used yet.
type reservation struct{ records, bytes int64 }

// topUp makes r hold records and bytes, reserving the difference, and
// reports whether it could.
func (s *Store) topUp(r *reservation, records, bytes int64) bool {
	if !s.tryReserve(records-r.records, bytes-r.bytes) {
		return false
	}
	r.records, r.bytes = records, bytes
	return true
}

// grow makes room, within owner's policy, for r to hold records and bytes
// (growth: what owner's usage grows by), and reports whether r holds them.
func (s *Store) grow(r *reservation, owner ownerID, records, bytes, growth int64, keep *ikey) bool {
	if !s.makeRoom(owner, records-r.records, bytes-r.bytes, growth, keep) {
		return false
	}
	r.records, r.bytes = records, bytes
	return true
}

// release gives back what r holds.
func (s *Store) release(r *reservation) {
	s.records.Add(-r.records)
	s.bytes.Add(-r.bytes)
	*r = reservation{}
}

// reserve adds n to v if n is not positive or the sum stays at most bound.
func reserve(v *atomic.Int64, n, bound int64) bool {
	if n <= 0 {
		v.Add(n)
		return true
	}
	for {
		cur := v.Load()
		if cur+n > bound {
			return false
		}
		if v.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}
