package memstore

// The operator's and the core's reads and settlements: Resolve, Get, Delete.

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/idemproxy/idemproxy/cache"
)

// Resolve implements cache.Store.
func (s *Store) Resolve(_ context.Context, key string, resp *cache.Response, ttl time.Duration) error {
	buf := encodeBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 {
			encodeBufs.Put(buf)
		}
	}()
	buf.Reset()
	if resp != nil {
		if resp.Unknown {
			return fmt.Errorf("memstore: resolving with another unknown outcome")
		}
		if err := cache.WriteResponse(buf, resp); err != nil {
			return err
		}
	}
	k := internKey(key)
	sh := s.shardFor(&k)
	var res reservation
	defer s.release(&res)
	for attempt := 1; ; attempt++ {
		done, need, err := s.resolveLocked(sh, &k, resp, ttl, buf.Bytes(), &res)
		if done || err != nil {
			return err
		}
		if attempt == roomAttempts || !s.grow(&res, need.owner, 0, need.bytes, need.growth, &k) {
			return fmt.Errorf("memstore: no room within the bounds for the resolved record: %w", cache.ErrFull)
		}
	}
}

// resolveLocked settles the unknown outcome under k for Resolve if the store
// has room for the new record, and reports done. Otherwise it changes nothing
// and returns the room it needs, and for whom.
func (s *Store) resolveLocked(sh *shard, k *ikey, resp *cache.Response, ttl time.Duration, response []byte, res *reservation) (bool, need, error) {
	now := s.now().UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if l := s.liveLockLocked(sh, k, now); l != nil {
		if !l.lapsed(now) {
			return false, need{}, fmt.Errorf("memstore: the key is in flight: %w", cache.ErrNotUnknown)
		}
		// A lapsed claim, held: settled as the claim's own completion would be,
		// keeping its token, so its late Complete writes nothing over it.
		if resp == nil {
			s.dropLockLocked(sh, k, l)
			return true, need{}, nil
		}
		return s.completeHeldLocked(sh, k, l.token, &cache.Record{Response: resp}, ttl, response, res, now)
	}
	e := s.lookupLocked(sh, k)
	if e == nil || e.expires() <= now {
		return false, need{}, cache.ErrNotFound
	}
	rec, err := e.record()
	if err != nil {
		return false, need{}, err
	}
	if !rec.Response.Unknown {
		return false, need{}, fmt.Errorf("memstore: the key holds a completed answer: %w", cache.ErrNotUnknown)
	}
	if resp == nil {
		s.dropIndexLocked(sh, e)
		return true, need{}, nil
	}
	n := entryHeader + len(rec.Fingerprint) + len(response)
	if size := int64(n) + indexBytes; size > s.maxByte.Load() || n > 1<<31 {
		return false, need{}, fmt.Errorf("memstore: record of %d bytes exceeds the store's %d-byte bound: %w", size, s.maxByte.Load(), cache.ErrFull)
	}
	newCap := s.newChunkFor(sh, n)
	if !s.topUp(res, 0, int64(newCap)) {
		return false, need{owner: e.owner(), bytes: int64(newCap), growth: int64(n - len(e))}, nil
	}
	*res = reservation{} // used
	// The new entry keeps the completing token's hash, so a late re-sent Complete
	// of the first execution is still recognised (and writes nothing), and its
	// owner; the old entry becomes a hole in the log.
	pos, ne := s.appendLocked(sh, n, newCap)
	entry(ne).write(k, e.tokenHash(), e.owner(), rec.Fingerprint, e.created(), now+int64(ttl), response)
	s.unindexLocked(sh, e)
	s.indexLocked(sh, pos, ne)
	s.owners.add(e.owner(), 0, int64(n-len(e)))
	sh.waiters.Notify(*k)
	return true, need{}, nil
}

// Get implements cache.Store.
func (s *Store) Get(_ context.Context, key string) (*cache.Record, error) {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	if l := s.liveLockLocked(sh, &k, now); l != nil {
		rec := l.record()
		if l.lapsed(now) {
			rec = l.lapsedRecord(false)
		}
		sh.mu.Unlock()
		return rec, nil
	}
	e := s.lookupLocked(sh, &k)
	if e == nil {
		sh.mu.Unlock()
		return nil, cache.ErrNotFound
	}
	if e.expires() <= now {
		s.dropIndexLocked(sh, e)
		sh.mu.Unlock()
		return nil, cache.ErrNotFound
	}
	rc := s.replaysLocked(sh, e)
	sh.mu.Unlock()
	rec, err := e.record()
	if err == nil {
		rc.fill(rec)
	}
	return rec, err
}

// Delete implements cache.Store.
func (s *Store) Delete(_ context.Context, key string) error {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if l, ok := sh.locks[k]; ok {
		s.dropLockLocked(sh, &k, l)
		if l.expires <= now {
			return cache.ErrNotFound
		}
		return nil
	}
	e := s.lookupLocked(sh, &k)
	if e == nil {
		return cache.ErrNotFound
	}
	s.dropIndexLocked(sh, e)
	if e.expires() <= now {
		return cache.ErrNotFound
	}
	return nil
}

// Ping implements cache.Store; the memory store is always reachable.
func (s *Store) Ping(context.Context) error { return nil }

// InProcess implements cache.InProcess: no operation blocks on I/O.
func (s *Store) InProcess() {}
