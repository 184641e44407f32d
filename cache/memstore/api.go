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

type lock struct {
	token, fingerprint string
	trace              string // Lock.Trace
	created, expires   int64  // unix nanoseconds
}

func (l *lock) size() int64 {
	return lockOverhead + int64(len(l.token)+len(l.fingerprint)+len(l.trace))
}

// LockOrGet implements cache.Store.
func (s *Store) LockOrGet(_ context.Context, key string, l cache.Lock) (*cache.Record, bool, error) {
	if l.Token == "" {
		return nil, false, fmt.Errorf("memstore: empty lock token")
	}
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	if cur, ok := sh.locks[k]; ok {
		if cur.expires > now && cur.token == l.Token {
			sh.mu.Unlock()
			return nil, false, nil // a re-sent claim: this token holds the lock
		}
		if cur.expires > now {
			rec := cur.record()
			sh.mu.Unlock()
			return rec, true, nil
		}
		s.dropLockLocked(sh, &k, cur)
	}
	if e := s.lookupLocked(sh, &k); e != nil {
		if e.expires() > now {
			sh.mu.Unlock()
			rec, err := e.record()
			return rec, true, err
		}
		s.dropIndexLocked(sh, &k)
	}
	nl := &lock{token: l.Token, fingerprint: l.Fingerprint, trace: string(l.Trace), created: now, expires: now + int64(l.Lease)}
	sh.locks[k] = nl
	s.records.Add(1)
	s.bytes.Add(nl.size())
	sh.mu.Unlock()

	if s.over() && !s.makeRoom(&k) {
		// Only in-flight locks are left: refuse this claim rather than evict one.
		sh.mu.Lock()
		if cur := sh.locks[k]; cur == nl {
			s.dropLockLocked(sh, &k, nl)
		}
		sh.mu.Unlock()
		return nil, false, fmt.Errorf("memstore: claiming key: %w", cache.ErrFull)
	}
	return nil, false, nil
}

var encodeBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Complete implements cache.Store.
func (s *Store) Complete(_ context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	if rec == nil || rec.Response == nil {
		return fmt.Errorf("memstore: completing without a response")
	}
	if token == "" {
		return cache.ErrLockLost
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
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	l, err := s.heldLocked(sh, &k, token, now)
	fp, created := rec.Fingerprint, now
	if !rec.CreatedAt.IsZero() {
		created = rec.CreatedAt.UnixNano()
	}
	if err == nil {
		fp, created = l.fingerprint, l.created
	} else if err = s.freeLocked(sh, &k, token, now); err != nil {
		// Held by another claim or record; or already completed by this token
		// (a re-sent Complete: nil).
		sh.mu.Unlock()
		if errors.Is(err, errCompletedByUs) {
			return nil
		}
		return err
	}
	n := entryHeader + len(fp) + buf.Len()
	if need := int64(n) + indexBytes; need > s.maxByte.Load() {
		sh.mu.Unlock()
		return fmt.Errorf("memstore: record of %d bytes exceeds the store's %d-byte bound: %w", need, s.maxByte.Load(), cache.ErrFull)
	}
	if n > 1<<31 {
		sh.mu.Unlock()
		return fmt.Errorf("memstore: record of %d bytes is too large: %w", n, cache.ErrFull)
	}
	pos, e := s.appendLocked(sh, n)
	entry(e).write(&k, tokenHash(token), fp, created, now+int64(ttl), buf.Bytes())

	if l != nil {
		delete(sh.locks, k) // the lock's record becomes the completed one
		s.bytes.Add(-l.size())
	} else {
		s.records.Add(1) // a late Complete on a free key
	}
	p := s.prefixOf(&k)
	if _, taken := sh.index[p]; taken {
		// Another key with the same 128-bit prefix (never seen in practice): its
		// record becomes a hole; this one takes the slot.
		s.records.Add(-1)
		s.bytes.Add(-indexBytes)
	}
	sh.index[p] = pos
	s.bytes.Add(indexBytes)
	sh.waiters.Notify(k)
	sh.mu.Unlock()

	if s.over() {
		s.makeRoom(&k)
	}
	return nil
}

var errCompletedByUs = errors.New("completed by this token")

// freeLocked decides a Complete whose token does not hold a live lock on k: nil
// when the key is free (no live lock or record: the lease lapsed and nobody
// claimed it, or it was purged), and a lapsed lock is dropped; errCompletedByUs
// when this token completed the live record; ErrLockLost when another claim or
// record holds it.
func (s *Store) freeLocked(sh *shard, k *ikey, token string, now int64) error {
	if cur, ok := sh.locks[*k]; ok {
		if cur.expires > now {
			return cache.ErrLockLost
		}
		s.dropLockLocked(sh, k, cur)
	}
	if e := s.lookupLocked(sh, k); e != nil && e.expires() > now {
		if e.tokenHash() == tokenHash(token) {
			return errCompletedByUs
		}
		return cache.ErrLockLost
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
	l.expires = now + int64(lease)
	return nil
}

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
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	if s.liveLockLocked(sh, &k, now) != nil {
		sh.mu.Unlock()
		return fmt.Errorf("memstore: the key is in flight: %w", cache.ErrNotUnknown)
	}
	e := s.lookupLocked(sh, &k)
	if e == nil || e.expires() <= now {
		sh.mu.Unlock()
		return cache.ErrNotFound
	}
	rec, err := e.record()
	if err != nil {
		sh.mu.Unlock()
		return err
	}
	if !rec.Response.Unknown {
		sh.mu.Unlock()
		return fmt.Errorf("memstore: the key holds a completed answer: %w", cache.ErrNotUnknown)
	}
	if resp == nil {
		s.dropIndexLocked(sh, &k)
		sh.mu.Unlock()
		return nil
	}
	n := entryHeader + len(rec.Fingerprint) + buf.Len()
	if need := int64(n) + indexBytes; need > s.maxByte.Load() || n > 1<<31 {
		sh.mu.Unlock()
		return fmt.Errorf("memstore: record of %d bytes exceeds the store's %d-byte bound: %w", need, s.maxByte.Load(), cache.ErrFull)
	}
	// The new entry keeps the completing token's hash, so a late re-sent Complete
	// of the first execution is still recognised (and writes nothing); the old
	// entry becomes a hole in the log.
	tok, created := e.tokenHash(), e.created()
	pos, ne := s.appendLocked(sh, n)
	entry(ne).write(&k, tok, rec.Fingerprint, created, now+int64(ttl), buf.Bytes())
	sh.index[s.prefixOf(&k)] = pos
	sh.waiters.Notify(k)
	sh.mu.Unlock()
	if s.over() {
		s.makeRoom(&k)
	}
	return nil
}

// Get implements cache.Store.
func (s *Store) Get(_ context.Context, key string) (*cache.Record, error) {
	k := internKey(key)
	now := s.now().UnixNano()
	sh := s.shardFor(&k)
	sh.mu.Lock()
	if l := s.liveLockLocked(sh, &k, now); l != nil {
		rec := l.record()
		sh.mu.Unlock()
		return rec, nil
	}
	e := s.lookupLocked(sh, &k)
	if e == nil {
		sh.mu.Unlock()
		return nil, cache.ErrNotFound
	}
	if e.expires() <= now {
		s.dropIndexLocked(sh, &k)
		sh.mu.Unlock()
		return nil, cache.ErrNotFound
	}
	sh.mu.Unlock()
	return e.record()
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
	s.dropIndexLocked(sh, &k)
	if e.expires() <= now {
		return cache.ErrNotFound
	}
	return nil
}

// Ping implements cache.Store; the memory store is always reachable.
func (s *Store) Ping(context.Context) error { return nil }

// liveLockLocked returns k's live lock, or nil; a lapsed one is dropped.
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

// heldLocked returns the live lock under k held by token.
func (s *Store) heldLocked(sh *shard, k *ikey, token string, now int64) (*lock, error) {
	l, ok := sh.locks[*k]
	if !ok || l.token != token || token == "" {
		return nil, cache.ErrLockLost
	}
	if l.expires <= now {
		s.dropLockLocked(sh, k, l)
		return nil, cache.ErrLockLost
	}
	return l, nil
}

func (s *Store) dropLockLocked(sh *shard, k *ikey, l *lock) {
	sh.waiters.Notify(*k)
	delete(sh.locks, *k)
	s.records.Add(-1)
	s.bytes.Add(-l.size())
}

func (l *lock) record() *cache.Record {
	return &cache.Record{
		Version:     cache.FormatVersion,
		State:       cache.StateInFlight,
		Fingerprint: l.fingerprint,
		CreatedAt:   time.Unix(0, l.created),
		ExpiresAt:   time.Unix(0, l.expires),
		Trace:       bytesOrNil(l.trace),
	}
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// InProcess implements cache.InProcess: no operation blocks on I/O.
func (s *Store) InProcess() {}
