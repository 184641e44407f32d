// Package cache defines what idemproxy stores and the contract every store meets.
//
// A record lives under an opaque store key (the middleware passes a hash of the
// request's scope and its Idempotency-Key). It is first claimed as an in-flight claim
// with a claim, then either completed with the response or released. Writes after the
// claim are fenced by the claim token returned at claim time, so a holder whose claim
// lapsed can never overwrite a newer holder.
package cache

import (
	"context"
	"errors"
	"time"
)

// Errors that callers branch on. Stores wrap them with %w; compare with errors.Is.
var (
	// ErrClaimLost: the token no longer holds the key (claim lapsed, record deleted,
	// or already completed/released).
	ErrClaimLost = errors.New("idempotency claim lost")
	// ErrNotFound: no live record under the key (Get and Delete only).
	ErrNotFound = errors.New("idempotency record not found")
	// ErrFull: the store is at its configured bound and nothing may be evicted
	// to make room (only in-flight claims are left).
	ErrFull = errors.New("idempotency store full")
	// ErrCorrupt: the value under a key is not a record this version can read.
	ErrCorrupt = errors.New("idempotency record corrupt")
	// ErrNotUnknown: Resolve found a live record that is not a held unknown
	// outcome (a claim in flight, or a completed answer).
	ErrNotUnknown = errors.New("idempotency record is not an unknown outcome")
)

// Claim is what a caller asks for when it claims a key.
type Claim struct {
	// Token fences every later write; it must be unique per claim (e.g. 128 random bits).
	Token string
	// Fingerprint identifies the request; it is stored with the claim so duplicates
	// that arrive while the first is in flight can be told apart from misuse.
	Fingerprint string
	// Duration is how long the claim lives unless it is extended or completed.
	Duration time.Duration
	// Trace is the first execution's trace context (opaque bytes from the
	// caller, at most MaxTrace), kept with the claim and returned as
	// Record.Trace while it is in flight, so a duplicate can link to it.
	// Optional.
	Trace []byte
	// Info is the first request and its history as EncodeInfo writes it
	// (at most MaxInfo bytes; opaque to the store), kept with the claim and
	// returned as Record.Info while it is in flight, and in the held record
	// of its lapse (LapsedRecord). A completed record's is its
	// Response.Info. Optional.
	Info string
	// Deferred, when set, gives Info and Owner where they are empty, on
	// demand (EncodedInfo, ScopeOwner): a store that keeps them only with a
	// new claim (the memory store) then never builds them for a claim that
	// finds a record, a replay. A store calls it on ClaimOrGet's goroutine
	// before returning. The middleware leaves Info and Owner to Deferred only
	// for a store that says it reads them so (DeferredClaims); every other
	// store, a wrapper around one included, gets both fields filled.
	Deferred ClaimSource
	// Owner identifies the client scope the record belongs to: a short opaque
	// string (the middleware passes 16 hex digits of a digest of the request's
	// scope, never a credential). A bounded store may use it to share its room
	// between clients, so that one client's volume cannot evict another's
	// completed records (the memory store does, keeping it with the claim and
	// the completed record). Stores without eviction ignore it (Redis and
	// PostgreSQL do). Optional: records without an owner share one.
	Owner string
	// Hold is how long the key stays held as an unknown outcome once the claim
	// lapses with the claim neither completed nor released (the instance that
	// claimed it died, or its writes stopped reaching the store). From the
	// lapse until Hold has passed, every claim and Get reads the claim as a held
	// unknown outcome (LapsedRecord), which Resolve settles like any other,
	// and which the token's own Complete or Release still replaces or frees (a
	// completion that lands late). Extend never revives it. Zero: a lapsed
	// lock frees the key, and the next claim runs it again (unknown_outcome
	// release).
	Hold time.Duration
	// TTL is how long the record will be kept once completed: the ttl the
	// caller means to give Complete (the middleware passes the route's
	// TTL). A store may use it to place the claim where its completed record
	// will belong (PostgreSQL: the row's sweep_at, so that the completion
	// changes no indexed column); Complete's own ttl still decides the
	// record's expiry. Zero: not known.
	TTL time.Duration
}

// DeferredClaims is implemented by stores that read a claim's Info and Owner
// only through Claim.EncodedInfo and Claim.ScopeOwner, so a caller may leave
// both fields to Claim.Deferred. A wrapper that reads the fields must not
// pass it on (embedding the cache.Store interface does not).
type DeferredClaims interface {
	ReadsDeferredClaims()
}

// ClaimSource builds a claim's Info and Owner on demand (Claim.Deferred).
type ClaimSource interface {
	ClaimInfo() string
	ClaimOwner() string
}

// EncodedInfo is l.Info, or what l.Deferred builds when Info is empty.
func (l *Claim) EncodedInfo() string {
	if l.Info == "" && l.Deferred != nil {
		return l.Deferred.ClaimInfo()
	}
	return l.Info
}

// ScopeOwner is l.Owner, or what l.Deferred builds when Owner is empty.
func (l *Claim) ScopeOwner() string {
	if l.Owner == "" && l.Deferred != nil {
		return l.Deferred.ClaimOwner()
	}
	return l.Owner
}

// MaxTrace bounds Claim.Trace and Response.Trace.
const MaxTrace = 64

// Store is the storage contract. Every method is safe for concurrent use, and the
// atomicity promised below holds across every process that shares the store.
//
// Every operation is idempotent for its token: a client library that re-sends a
// call after a lost reply (go-redis does, on a broken connection) gets the answer
// the first call got, never a conflict with itself.
type Store interface {
	// ClaimOrGet claims key if no live record exists: it stores an in-flight record
	// with lock.Fingerprint and returns (nil, false, nil), and the caller now holds the
	// lease. A claim by the token that already holds the live claim answers the
	// same (a re-sent claim). Otherwise it returns the existing record (in flight
	// or completed) with loaded=true. Check and claim are one atomic step.
	//
	// A claim that lapsed within its Claim.Hold is returned as a held
	// unknown outcome (LapsedRecord). The first claim that finds it with the
	// lock's fingerprint marks it found, with its token, and gets it with
	// Record.Found set (a re-sent claim of that token too), so that exactly
	// one caller reports the hold; that mark is the only write a loaded claim
	// makes.
	ClaimOrGet(ctx context.Context, key string, lock Claim) (rec *Record, loaded bool, err error)

	// Complete replaces the caller's in-flight claim with the completed record rec,
	// which then lives for ttl: its live claim, or its claim that lapsed and
	// which is held (Claim.Hold; found or not). It also succeeds when the key is
	// free (no live claim or record: the claim lapsed during a store outage, the
	// lock is gone, and nobody claimed the key since), storing rec with its
	// Fingerprint and CreatedAt; and when token already completed the live record
	// (a re-sent Complete, which writes nothing). It fails with ErrClaimLost when
	// another claim or record holds the key.
	Complete(ctx context.Context, key, token string, rec *Record, ttl time.Duration) error

	// Release deletes the caller's in-flight claim (live, or lapsed and held) so
	// the key can be claimed again. It succeeds when the key is free afterwards,
	// also when nobody held it (a re-sent Release); it fails with ErrClaimLost when
	// another claim or a completed record holds the key.
	Release(ctx context.Context, key, token string) error

	// Extend renews the caller's claim to lease from now (and the claim's hold
	// with it). It fails with ErrClaimLost unless token holds the key with a
	// lease that has not lapsed.
	Extend(ctx context.Context, key, token string, lease time.Duration) error

	// Resolve settles a held unknown outcome (a completed record whose
	// Response.Unknown is set, or a lapsed claim held as one) for an operator: with resp, the record's response
	// becomes resp, which then lives for ttl, keeping the record's fingerprint and
	// creation time (a retry of the same request is answered resp, another
	// request under the key 422); with a nil resp, the record is deleted and the
	// next retry runs. It fails with ErrNotFound when no live record exists and
	// with ErrNotUnknown when the live record is anything else, changing nothing.
	// Check and write are one atomic step, so it never touches a record that
	// replaced the unknown one (Get then Delete could delete a new claim).
	Resolve(ctx context.Context, key string, resp *Response, ttl time.Duration) error

	// Get returns the live record under key, or ErrNotFound. For operators.
	Get(ctx context.Context, key string) (*Record, error)

	// Delete removes the record under key whatever its state, or returns
	// ErrNotFound. For operators: a deleted in-flight claim lets the key run again.
	Delete(ctx context.Context, key string) error

	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error
}

// Notifier is implemented by stores that can announce that a key's record changed
// (completed, released or deleted), so duplicates waiting for an in-flight request
// are woken without polling. Notifications are a latency optimisation: a waiter
// must re-read the store after waking, and must also poll, since a notification
// can be lost (a dropped pub/sub connection, another process's store).
type Notifier interface {
	// Subscribe returns a channel that is closed at the key's next change, and a
	// function to call when the caller no longer waits. Subscribe before reading the
	// record, so a change between the read and the wait is not missed. A store may
	// announce only the changes of a claim in flight when Subscribe ran (PostgreSQL
	// and Redis mark it): a waiter that reads a claim claimed after that subscribes
	// and reads again before waiting for it.
	Subscribe(key string) (changed <-chan struct{}, cancel func())
}

// LocalCacher is implemented by the stores that may keep completed records in
// the process's memory (Redis, PostgreSQL: their local cache).
type LocalCacher interface {
	// LocalCacheStats reports the local cache's use; false when the store
	// keeps none.
	LocalCacheStats() (LocalCacheStats, bool)
}

// LocalCacheStats is a local cache's use since the store opened.
type LocalCacheStats struct {
	MaxBytes, Bytes, Records int64 // its bound, and what it holds
	// Hits are claims answered from it, Misses those sent to the store.
	Hits, Misses int64
	// Invalidations are records it dropped because their change was
	// announced (a delete or resolve through any instance).
	Invalidations int64
	// Flushes count the times its subscription broke, which emptied it.
	Flushes int64
	// Untrusted is how long, while claims kept consulting it, it answered
	// nothing because no ping of its own had come back recently (a broken or
	// slow subscription). An idle cache sends no pings and is not trusted:
	// the claim that finds it so wakes it, and is not counted.
	Untrusted time.Duration
}

// ReplayCounter is implemented by stores that count the replays of their
// records (Record.Replays, Record.LastReplay), which the middleware tells
// them of.
type ReplayCounter interface {
	// CountReplay counts one answer from the record under key, whose
	// CreatedAt is created, at at. It never waits for the store: a store
	// whose writes are round trips adds counts up in memory and writes them
	// in the background, all its keys in one batch every ReplayFlush and on
	// Close (so a crash loses the counts of the last ReplayFlush at most).
	// A count whose record was replaced meanwhile (a CreatedAt of another)
	// is dropped, as are those past a store's bound on the keys it holds.
	CountReplay(key string, created, at time.Time)
	// FlushReplays writes the counts added up so far now (a store that
	// writes each at once has none to write).
	FlushReplays(ctx context.Context) error
}

// ReplayFlush is how often a store that batches replay counts writes them.
const ReplayFlush = 2 * time.Second

// InProcess is implemented by stores whose operations never block on I/O (the
// memory store). The middleware then skips per-call timeouts, which would only
// cost allocations.
type InProcess interface {
	InProcess()
}

// RequestBounded is implemented by stores that bound each of their requests
// themselves (a timeout per request to the database), so a caller need not
// bound a whole call. A call that moves much data in many requests (the
// DynamoDB store writes a large response as one request per few chunks, at
// the pace the table takes them) may then take longer than any one request
// may, and still fails fast when the store stops answering. The middleware
// gives Complete no overall deadline on such a store.
type RequestBounded interface {
	BoundsRequests()
}

// Pinned is implemented by stores shared through a pool that may be closed while
// requests still use them (a Caddy config reload). The middleware pins the store
// for every tracked request, and for a completion retried in the background until
// it ends; the store must not close while any pin is out. Pin returns the unpin.
type Pinned interface {
	Pin() (unpin func())
}
