package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// lock is an in-flight claim. Its claim ends at lease; the claim lives until
// expires, which is later by the claim's hold (cache.Claim.Hold): in between it
// is held as an unknown outcome.
type lock struct {
	token, fingerprint string
	trace              string // Claim.Trace
	info               string // Claim.Info
	found              string // the token of the claim that found it lapsed
	created, expires   int64  // unix nanoseconds
	lease              int64  // unix nanoseconds
	owner              ownerID
}

// lapsed reports whether the claim's claim lapsed (and it is held, while it
// has not expired).
func (l *lock) lapsed(now int64) bool { return l.lease <= now }

func (l *lock) size() int64 {
	return lockOverhead + int64(len(l.token)+len(l.fingerprint)+len(l.trace)+len(l.info))
}

// ReadsDeferredClaims implements cache.DeferredClaims: a claim's Info and
// Owner are read through Claim.EncodedInfo and Claim.ScopeOwner.
func (*Store) ReadsDeferredClaims() {}

// ClaimOrGet implements cache.Store. A claim at a bound makes room within the
// eviction policy (see makeRoom), and fails with cache.ErrFull when nothing it
// may evict is left.
func (s *Store) ClaimOrGet(_ context.Context, key string, l cache.Claim) (*cache.Record, bool, error) {
	if l.Token == "" {
		return nil, false, fmt.Errorf("memstore: empty claim token")
	}
	k := internKey(key)
	sh := s.shardFor(&k)
	// The owner and the info are asked for only by a new claim (l.Deferred
	// may build them, a replay never needs them), and outside the lock.
	var (
		owner ownerID
		info  string
		built bool
	)
	var res reservation
	defer s.release(&res) // what a claim that found a record did not use
	for attempt := 1; ; attempt++ {
		now := s.now().UnixNano()
		sh.mu.Lock()
		if cur, ok := sh.locks[k]; ok {
			switch {
			case cur.expires <= now:
				s.dropLockLocked(sh, &k, cur)
			case cur.lapsed(now):
				// Held: the first claim of the same request finds it.
				if cur.found == "" && cur.fingerprint == l.Fingerprint {
					cur.found = l.Token
				}
				rec := cur.lapsedRecord(cur.found == l.Token)
				sh.mu.Unlock()
				return rec, true, nil
			case cur.token == l.Token:
				sh.mu.Unlock()
				return nil, false, nil // a re-sent claim: this token holds the claim
			default:
				rec := cur.record()
				sh.mu.Unlock()
				return rec, true, nil
			}
		}
		if e := s.lookupLocked(sh, &k); e != nil {
			if e.expires() > now {
				sh.mu.Unlock()
				rec, err := e.record()
				return rec, true, err
			}
			s.dropIndexLocked(sh, e)
		}
		if !built {
			sh.mu.Unlock()
			owner, info, built = ownerOf(l.ScopeOwner()), l.EncodedInfo(), true
			attempt-- // not a try for room: look again, with them built
			continue
		}
		nl := &lock{token: l.Token, fingerprint: l.Fingerprint, trace: string(l.Trace), info: info, created: now,
			lease: now + int64(l.Duration), expires: now + int64(l.Duration) + int64(max(l.Hold, 0)), owner: owner}
		// The owner's row, should this be its first record, is reserved too.
		need := nl.size() + ownerBytes
		if s.topUp(&res, 1, need) {
			res = reservation{}
			sh.locks[k] = nl
			s.bytes.Add(s.owners.add(owner, 1, nl.size()) - ownerBytes)
			sh.mu.Unlock()
			return nil, false, nil
		}
		sh.mu.Unlock()
		if attempt == roomAttempts || !s.grow(&res, owner, 1, need, need, nil) {
			// Nothing this claim may evict is left: refuse it rather than
			// evict an in-flight claim or another client's protected record.
			return nil, false, fmt.Errorf("memstore: claiming key: no room within the bounds that this client may take: %w", cache.ErrFull)
		}
	}
}

var encodeBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Complete implements cache.Store. A completion at a bound makes room within
// the eviction policy (see makeRoom), and fails with cache.ErrFull, leaving the
// lock as it was, when its record does not fit; a record no larger than the
// lock it replaces (the not-replayable marker: status, body size, trace) always
// fits.
func (s *Store) Complete(_ context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	if rec == nil || rec.Response == nil {
		return fmt.Errorf("memstore: completing without a response")
	}
	if token == "" {
		return cache.ErrClaimLost
	}
	buf := encodeBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 {
			encodeBufs.Put(buf)
		}
	}()
	buf.Reset()
	if err := cache.WriteResponse(buf, rec.Response); err != nil {
		return err
	}
	k := internKey(key)
	sh := s.shardFor(&k)
	var res reservation
	defer s.release(&res)
	for attempt := 1; ; attempt++ {
		done, need, err := s.completeLocked(sh, &k, token, rec, ttl, buf.Bytes(), &res)
		if done || err != nil {
			return err
		}
		if attempt == roomAttempts || !s.grow(&res, need.owner, need.records, need.bytes, need.growth, nil) {
			return fmt.Errorf("memstore: no room within the bounds for a %d-byte record of this client: %w", buf.Len(), cache.ErrFull)
		}
	}
}

// need is the room a write needs, for whom, and what the owner's usage grows
// by with it.
type need struct {
	owner                  ownerID
	records, bytes, growth int64
}

// completeLocked stores the completed record for Complete if res holds, or
// can be topped up to, the room it needs, and reports done. Otherwise it
// changes nothing and returns the room it needs.
func (s *Store) completeLocked(sh *shard, k *ikey, token string, rec *cache.Record, ttl time.Duration, response []byte, res *reservation) (bool, need, error) {
	now := s.now().UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return s.completeHeldLocked(sh, k, token, rec, ttl, response, res, now)
}

// completeHeldLocked is completeLocked with the shard's lock held.
func (s *Store) completeHeldLocked(sh *shard, k *ikey, token string, rec *cache.Record, ttl time.Duration, response []byte, res *reservation, now int64) (bool, need, error) {
	l, err := s.heldLocked(sh, k, token, now)
	fp, created := rec.Fingerprint, now
	if !rec.CreatedAt.IsZero() {
		created = rec.CreatedAt.UnixNano()
	}
	var nd need
	var lockSize, row int64 // what the claim held; the owner's row, reserved
	if err == nil {
		fp, created, nd.owner, lockSize = l.fingerprint, l.created, l.owner, l.size()
	} else if err = s.freeLocked(sh, k, token, now); err != nil {
		// Held by another claim or record; or already completed by this token
		// (a re-sent Complete: nil).
		if errors.Is(err, errCompletedByUs) {
			return true, nd, nil
		}
		return false, nd, err
	} else {
		// A late Complete on a free key: a record more, with no owner known
		// (the claim that named it is gone); its row is reserved too.
		nd.owner, nd.records, row = ownerOf(""), 1, ownerBytes
	}
	n := entryHeader + len(fp) + len(response)
	if size := int64(n) + indexBytes; size > s.maxByte.Load() {
		return false, nd, fmt.Errorf("memstore: record of %d bytes exceeds the store's %d-byte bound: %w", size, s.maxByte.Load(), cache.ErrFull)
	}
	if n > 1<<31 {
		return false, nd, fmt.Errorf("memstore: record of %d bytes is too large: %w", n, cache.ErrFull)
	}
	newCap := s.newChunkFor(sh, n)
	nd.growth = int64(n) + indexBytes - lockSize           // the owner's usage counts the entry
	nd.bytes = int64(newCap) + indexBytes - lockSize + row // the store's, the chunk
	if !s.topUp(res, nd.records, nd.bytes) {
		if l == nil || newCap == 0 || nd.growth > 0 {
			return false, nd, nil
		}
		// A record no larger than its claim (the not-replayable marker the
		// core stores when a response does not fit) always takes the claim's
		// place: in a chunk of its own size, it adds nothing.
		newCap = n
		s.release(res)
		s.bytes.Add(nd.growth)
	}
	*res = reservation{} // used
	pos, e := s.appendLocked(sh, n, newCap)
	entry(e).write(k, tokenHash(token), nd.owner, fp, created, now+int64(ttl), response)
	if l != nil {
		delete(sh.locks, *k) // the claim's record becomes the completed one
	}
	if old, taken := sh.index[s.prefixOf(k)]; taken {
		// Another key with the same 128-bit prefix (never seen in practice), or
		// this key's expired record: it becomes a hole; this one takes the slot.
		s.dropIndexLocked(sh, sh.entryAt(old))
	}
	s.indexLocked(sh, pos, e)
	s.bytes.Add(s.owners.add(nd.owner, nd.records, nd.growth) - row)
	sh.waiters.Notify(*k)
	return true, nd, nil
}

var errCompletedByUs = errors.New("completed by this token")

// freeLocked decides a Complete whose token does not hold a live claim on k: nil
// when the key is free (no live claim or record: the claim lapsed and nobody
// claimed it, or it was purged), and a lapsed claim is dropped; errCompletedByUs
// when this token completed the live record; ErrClaimLost when another claim or
// record holds it.
func (s *Store) freeLocked(sh *shard, k *ikey, token string, now int64) error {
	if cur, ok := sh.locks[*k]; ok {
		if cur.expires > now {
			return cache.ErrClaimLost
		}
		s.dropLockLocked(sh, k, cur)
	}
	if e := s.lookupLocked(sh, k); e != nil && e.expires() > now {
		if e.tokenHash() == tokenHash(token) {
			return errCompletedByUs
		}
		return cache.ErrClaimLost
	}
	return nil
}

// Release implements cache.Store.
func (s *Store) Release(_ context.Context, key, token string) error {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l, err := s.heldLocked(sh, &k, token, now)
	if err != nil {
		// Idempotent: a key nobody holds is free, as a Release wants it.
		if _, locked := sh.locks[k]; !locked {
			if e := s.lookupLocked(sh, &k); e == nil || e.expires() <= now {
				return nil
			}
		}
		return err
	}
	s.dropLockLocked(sh, &k, l)
	return nil
}

// Extend implements cache.Store.
func (s *Store) Extend(_ context.Context, key, token string, lease time.Duration) error {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l, err := s.heldLocked(sh, &k, token, now)
	if err != nil {
		return err
	}
	if l.lapsed(now) {
		return cache.ErrClaimLost // held as an unknown outcome: never revived
	}
	hold := l.expires - l.lease
	l.lease = now + int64(lease)
	l.expires = l.lease + hold
	return nil
}

// liveLockLocked returns k's live claim, or nil; a lapsed one is dropped.
func (s *Store) liveLockLocked(sh *shard, k *ikey, now int64) *lock {
	l, ok := sh.locks[*k]
	if !ok {
		return nil
	}
	if l.expires > now {
		return l
	}
	s.dropLockLocked(sh, k, l)
	return nil
}

// heldLocked returns the claim under k held by token: live, or lapsed and held.
func (s *Store) heldLocked(sh *shard, k *ikey, token string, now int64) (*lock, error) {
	l, ok := sh.locks[*k]
	if !ok || l.token != token || token == "" {
		return nil, cache.ErrClaimLost
	}
	if l.expires <= now {
		s.dropLockLocked(sh, k, l)
		return nil, cache.ErrClaimLost
	}
	return l, nil
}

func (s *Store) dropLockLocked(sh *shard, k *ikey, l *lock) {
	sh.waiters.Notify(*k)
	delete(sh.locks, *k)
	s.records.Add(-1)
	s.bytes.Add(-l.size() + s.owners.add(l.owner, -1, -l.size()))
}

// lapsedRecord is the claim read as the held unknown outcome it is once its
// claim lapsed.
func (l *lock) lapsedRecord(found bool) *cache.Record {
	return cache.LapsedRecord(l.fingerprint, time.Unix(0, l.created), time.Unix(0, l.expires), bytesOrNil(l.trace), l.info, found)
}

func (l *lock) record() *cache.Record {
	return &cache.Record{
		Version:     cache.FormatVersion,
		State:       cache.StateInFlight,
		Fingerprint: l.fingerprint,
		CreatedAt:   time.Unix(0, l.created),
		ExpiresAt:   time.Unix(0, l.lease),
		Trace:       bytesOrNil(l.trace),
		Info:        l.info,
	}
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
