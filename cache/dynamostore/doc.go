// Package dynamostore is a cache.Store on Amazon DynamoDB (the AWS SDK for Go
// v2), shared by every instance that points at the same table: no server of
// your own, and DynamoDB's time to live deletes what has expired.
//
// # Requests
//
// Every operation on a record is one request on one item; every write is
// conditional, atomic on its own and idempotent for its token: a claim is a
// PutItem, Complete an UpdateItem, Release a DeleteItem, Extend an
// UpdateItem, Resolve an UpdateItem (a PutItem for a nil resolution), Delete
// a PutItem; Get is a strongly consistent GetItem. A first execution is two
// requests (claim, complete) plus one per claim renewal; a replay, a 409
// and a 422 are one: the claim's condition fails and DynamoDB returns the
// record with the failure (ReturnValuesOnConditionCheckFailure ALL_OLD; a
// server that leaves it out is answered by a strongly consistent GetItem).
// A response kept in chunk items (see Limits) adds its chunk writes to Complete
// (one BatchWriteItem per 5 chunks, 2 MiB) and one BatchGetItem to a replay.
// Reconcile jobs (see Reconcile) take a GetItem and a TransactWriteItems per
// write, and a Query per worker poll.
//
// The SDK re-sends a request whose reply was lost, and every request is
// built so that the re-sent one answers as the first did: a claim admits its
// own claim, a Complete finds the record its token completed (the token is kept
// on the completed record), Extend finds the claim it set (the request carries
// its clock), Release finds the key free, and Resolve and Delete find their
// call's id on the item they wrote. A Delete, and a Resolve that releases the
// key, leave a tombstone (state 0, lapsed at the epoch) for that reason; to
// every reader it is no record.
//
// # Table
//
// The table has a string hash key pk and a string range key sk, on-demand
// billing, and DynamoDB's time to live on the ttl attribute. Open creates it
// when Options.CreateTable is set; TableDefinition and Schema give its
// definition for other tools (`idemproxy migrate` prints Schema). A record is
// one item:
//
//	pk   S     the store key (the middleware's: a SHA-256 hex digest)
//	sk   S     "r"
//	st   N     1 in flight, 2 completed, 0 a tombstone
//	tok  B     the claim token; kept once completed, so a re-sent Complete is recognised
//	fp   B     the request's fingerprint
//	ca   N     when the key was claimed, Unix milliseconds
//	ex   N     when the record lapses, Unix milliseconds: a completed record's TTL;
//	           an in-flight claim's claim end plus its hold (cache.Claim.Hold)
//	le   N     an in-flight claim's claim end, Unix milliseconds; from it until ex the
//	           lock is held as an unknown outcome
//	hd   N     an in-flight claim's hold, milliseconds (Extend keeps ex at le plus hd)
//	hs   N     the same in whole seconds, rounded up (and ttl at le's second plus hs)
//	lf   B     the token of the claim that first found the claim's claim lapsed
//	ttl  N     DynamoDB's time to live, Unix seconds (the second after ex)
//	unk  BOOL  the response is a held unknown outcome
//	tr   B     an in-flight claim's trace context
//	rsp  B     the msgpack-encoded response (cache.EncodeResponse), when inline
//	nch  N     how many chunk items hold the encoded response, when chunked
//	cv   S     the chunk items' version
//	rsz  N     the encoded response's length, when chunked
//	op   S     the id of the Resolve or Delete that last wrote the item
//
// A chunk item holds up to ChunkSize bytes of an encoded response:
//
//	pk   S     the store key
//	sk   S     "c#<cv>#<index>"
//	d    B     the bytes
//	ttl  N     the record's ttl plus an hour
//
// The version cv is a digest of what wrote the chunks (the completing token,
// or the Resolve call's id) and of their content: chunks are written before
// the record that names them, a re-sent write puts the same items under the
// same keys, and a key claimed again never reads the chunks of a previous
// record. The chunks of a record that is deleted, resolved or overwritten by a
// new claim are deleted with it (best effort: they expire anyway).
//
// The store needs these IAM actions on the table: dynamodb:GetItem, PutItem,
// UpdateItem, DeleteItem, BatchGetItem, BatchWriteItem, Query and
// DescribeTable (a TransactWriteItems is allowed by the actions it is made
// of: PutItem, UpdateItem, DeleteItem); DescribeTimeToLive when Options.Warn is
// set; CreateTable and UpdateTimeToLive when Options.CreateTable is.
//
// # Large responses
//
// A response's chunk items share its store key, so one partition, which takes
// about 1000 write units (1 MB) a second: a 7 MB response takes 7 seconds to
// write, longer than the core's store_timeout. So the store bounds each
// request itself, by Options.RequestTimeout (cache.RequestBounded: the core
// then gives Complete no overall deadline), sends at most 5 chunks (2 MiB) a
// request, and goes on while DynamoDB takes some of them: only rounds that
// write nothing (every item left unprocessed, or the request throttled past
// the SDK's re-sends), eight in a row with a growing pause (2.6 s in all),
// fail the call. A Complete that failed part-way is resumed by the next
// Complete of the same token and response (the middleware's retry): the
// chunk keys are the same (a response always encodes to the same bytes), and
// the store remembers, in memory, which chunks DynamoDB confirmed, so it
// writes only the others. It forgets a set once it is whole, before a record
// names it, and after half of chunkGrace (their time to live must outlast the
// record); at most 64 sets are remembered.
//
// # Reconcile
//
// The store keeps reconcile jobs (cache.Reconciler) in the same table, with
// no index: a job item per held key, and an entry per job in one schedule
// partition whose sort key is its due time:
//
//	pk   S     the store key             pk   S   "idemproxy:reconcile"
//	sk   S     "j"                       sk   S   "<due, Unix ms, 16 digits>#<jv>"
//	job  B     the encoded cache.Job     k    S   the store key
//	jv   S     the version of its last write
//	ssk  S     its entry's sort key
//	jtk  B     the claim's token, while claimed
//	fin  B     the token that finished it (a tombstone, kept an hour)
//	ttl  N     the hold's end plus an hour (the entry's too)
//
// A claim is a strongly consistent Query of the entries due (the first 10, in
// due order), a GetItem of the first job, and a TransactWriteItems that moves
// its entry to now plus the claim and sets the token, conditioned on the
// version read: of two claimers one wins, the other tries the next entry, and
// a claimer that dies lets the job come back when the claim lapses. Schedule,
// update and finish are a GetItem and a TransactWriteItems each (update and
// finish conditioned on the token too). Every transaction carries a
// ClientRequestToken, and a re-sent one that DynamoDB refuses is recognised by
// the version it set. An entry whose job is gone (expired first) is deleted by
// the claim that finds it; a job whose key was settled otherwise is finished
// by the worker that finds the key so.
//
// The schedule is one partition: about 1000 write units a second. A job that
// settles at its first attempt writes 8 units there (its entry put at
// schedule, moved at the claim, deleted at the finish, each 2 units as part of
// a transaction), so about 125 held outcomes a second are settled at its pace;
// held outcomes are rare (an upstream that acted and lost its answer), and a
// burst past it is throttled (the SDK re-sends; a claim that still fails waits
// for the next poll; a schedule that still fails leaves the key held for an
// operator, logged).
//
// # Expiry and consistency
//
// DynamoDB's deletion of expired items can lag for days, so nothing relies on
// it: every condition and every read compares ex with the clock, and a lapsed
// record is as good as absent. DynamoDB has no clock a condition can read, so
// leases are judged by the instances' clocks: every instance sharing a table
// must keep time (NTP, the Amazon Time Sync Service); a skew of s between two
// of them shortens or lengthens a claim by s as the other sees it. Reads that
// decide anything are strongly consistent (GetItem and BatchGetItem with
// ConsistentRead); conditional writes always are.
//
// # Waiting
//
// DynamoDB announces no changes. The store implements cache.Notifier for its
// own process: a Complete, Release, Resolve or Delete through a Store wakes
// that Store's waiters at once. A duplicate waiting on another instance sees
// the change at its next poll (the middleware's wait_poll, 250 ms by default:
// on average half of it, plus a claim).
//
// # Limits
//
// DynamoDB items stop at 400 KB. An encoded response (status, headers, body,
// trailers) up to Options.InlineLimit (4 KiB by default, at most 300 KiB) is
// kept in the record item; a larger one is split over chunk items of
// ChunkSize (396 KiB). Responses up to Options.MaxResponse (16 MiB by default,
// above the core's 10 MiB max_stored_body; at most 256 MiB) replay
// byte-identical. Above it Complete answers cache.ErrFull, and the middleware
// stores its not-replayable marker instead: retries get 409, never a second
// execution. Keys are at most MaxKey (1024) bytes of UTF-8.
//
// # Capacity
//
// DynamoDB charges a write 1 unit per KB (rounded up) of the larger of the item
// before and after it, a failed conditional write too (it reports no figure
// for one: Options.Capacity receives it estimated by that rule), and a
// strongly consistent read 1 unit per 4 KB. With small responses: a first
// execution costs 2 write units, a replay, a 409 and a 422 one each (the
// failed claim: a record item is a few hundred bytes plus its encoded response);
// Release, Extend 1. A chunked response costs its size in write units once
// (about 1 per KB), and a quarter of that in read units per replay. Keeping
// the record item small (InlineLimit) keeps every failed claim at one unit.
// A TransactWriteItems costs 2 write units per KB of each item it writes, so
// with a job of under 1 KB: a schedule 4 (6 to replace a job), a claim, an
// update 6, a finish 4, each with a strongly consistent read of the job (1
// read unit); each worker's poll (a second apart) is a strongly consistent
// Query, 1 read unit when nothing is due.
package dynamostore
