package redisstore

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Every operation is one script on one key, so it is atomic and needs no hash tags
// in Cluster. A record is a hash:
//
//	v    format version ("1")
//	st   state: "1" in flight, "2" completed
//	fp   request fingerprint
//	tok  lock token; kept once completed, so a re-sent Complete is recognised
//	ca   created-at, Unix milliseconds
//	ex   lease or record expiry, Unix milliseconds (checked on read)
//	resp msgpack-encoded response (completed); in flight, the lock's trace
//	     context (Lock.Trace, raw), when it has one
//	u    "1" when resp is a held unknown outcome (so Resolve need not decode it)
//	ls   an in-flight lock's lease, ms (restartGraceLua)
//	gr   when the first claim after a restart found the lock lapsed, ms (restartGraceLua)
//	w    "1" when a duplicate waits for this lock in flight (markScript): only then
//	     do Complete and Release announce the change
//
// PEXPIRE removes the key when ex passes (an in-flight lock restartKeepMS later); ex is checked as well so that an injected
// clock (ARGV now, 0 = the server's TIME) decides expiry consistently.
//
// Token mismatches are answered with a value (0), never an error: Go does not match
// on error text. A value under the key that is not one of our hashes answers -1.
//
// Every script is idempotent for its token: go-redis re-sends a call whose reply
// was lost with the connection, and the re-run must answer as the first did. A
// claim by the token that already holds the lock answers "claimed"; a Complete by
// the token that completed the record answers 1; a Release of a key nobody holds
// answers 1 (the key is free, as the Release wants it).

// nowLua sets `now`, in milliseconds, from ARGV[n] or the server clock.
const nowLua = `
local now = tonumber(ARGV[%d])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// readLua reads the record into r = {v, st, fp, ca, ex, resp, tok}; live is true when it
// exists and has not expired. It answers -1 for a foreign value.
//
// A record always has v and ex, so HMGET alone tells a record from a missing key
// on the hot paths (replay, conflict); a WRONGTYPE error means a foreign value.
// Only when HMGET finds neither field does EXISTS tell a missing key (the first
// execution's path) from a foreign hash.
const readLua = `
local r = redis.pcall('HMGET', KEYS[1], 'v', 'st', 'fp', 'ca', 'ex', 'resp', 'tok')
if r['err'] then return {-1} end
local kind = 'hash'
if not r[1] and not r[5] then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
  kind = 'none'
elseif r[1] ~= '1' or not tonumber(r[5]) then
  return {-1}
end
local live = kind == 'hash' and tonumber(r[5]) > now
`

// restartGraceLua: a lock whose lease lapsed while this server was down (or
// loading its data) is held for one more lease from the first claim that finds
// it after the restart. The instance that holds it may have finished its request
// during the outage and be retrying to store the response (complete_retry);
// without this, a client's retry, answered as soon as the server accepts
// commands, would claim the lapsed key first and run again. A lock carries its
// lease ('ls') for this; one last written before the server started is one that
// outlived a restart (uptime_in_seconds counts whole seconds, so the start is
// taken a second early: a lock written in the second before a restart may go
// without the grace, never one written after it). The grace starts at that first
// claim ('gr'), not at the server's start: loading a large append-only file takes
// seconds, during which no request is answered. Only with the server's clock
// (ARGV now = 0): an injected clock (tests) has no relation to the server's
// uptime. A promoted replica has been up all along, so a failover grants nothing;
// a server that refuses INFO grants nothing. In-flight locks are kept (PEXPIRE)
// for restartKeepMS past their lease, so a restart shorter than that finds them.
const restartGraceLua = `
if not live and kind == 'hash' and r[2] == '1' and tonumber(ARGV[4]) == 0 then
  local g = redis.call('HMGET', KEYS[1], 'ls', 'gr')
  local ls, gr = tonumber(g[1]), tonumber(g[2])
  if ls and gr then
    if now < gr + ls then live = true end
  elseif ls then
    local info = redis.pcall('INFO', 'server')
    local up = type(info) == 'string' and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
    if up and tonumber(r[5]) - ls < now - (up + 1) * 1000 then
      redis.call('HSET', KEYS[1], 'gr', now)
      live = true
    end
  end
end
`

// restartKeepMS is how long an in-flight lock's hash outlives its lease, for
// restartGraceLua: 5 minutes, complete_retry's default.
const restartKeepMS = 300000

// lockScript: KEYS[1]; ARGV token, fingerprint, lease ms, now ms, trace context.
// Answers {0} when claimed (also when ARGV token already holds the lock: a re-sent
// claim), {1, v, st, fp, ca, ex, resp, now} when another live record exists
// (now: the clock the script used, for the record's remaining life).
var lockScript = redis.NewScript(fmt.Sprintf(nowLua, 4) + readLua + restartGraceLua + `
if live then
  if r[2] == '1' and r[7] == ARGV[1] then return {0} end
  return {1, r[1], r[2], r[3], r[4], r[5], r[6] or false, now}
end
if kind == 'hash' then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'v', '1', 'st', '1', 'tok', ARGV[1], 'fp', ARGV[2], 'ca', now, 'ex', now + tonumber(ARGV[3]), 'ls', ARGV[3])
if ARGV[5] and ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'resp', ARGV[5]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + ` + fmt.Sprint(restartKeepMS) + `)
return {0}
`)

// heldLua answers 0 unless ARGV[1] holds a live in-flight lock on KEYS[1].
const heldLua = `
local h = redis.call('HMGET', KEYS[1], 'st', 'tok', 'ex')
if h[1] ~= '1' or h[2] ~= ARGV[1] or not tonumber(h[3]) or tonumber(h[3]) <= now then return 0 end
`

// Complete and release announce the change on the store's notification channel
// (an ARGV) when a duplicate waits for the lock (w, set by markScript); resolve
// and delete always, since every instance's local cache must hear of them. A
// PUBLISH inside the script costs no round trip, but reaches every subscribed
// instance: announcing every completion would send each to all of them.

// markScript: KEYS[1]. Marks an in-flight lock as waited for (Subscribe). Answers 1
// when the key holds a lock in flight (marked now or before), 0 otherwise. It
// writes only an unmarked lock of ours: every waiting duplicate runs it at each
// wake-up and poll, and a write (propagated to replicas and the append-only
// file) each time would let duplicates make the server write without bound.
var markScript = redis.NewScript(`
local h = redis.pcall('HMGET', KEYS[1], 'v', 'st', 'w')
if h['err'] then return 0 end
if h[1] ~= '1' or h[2] ~= '1' then return 0 end
if h[3] ~= '1' then redis.call('HSET', KEYS[1], 'w', '1') end
return 1
`)

// completeScript: KEYS[1]; ARGV token, response, ttl ms, now ms, channel,
// fingerprint, created ms, unknown ("1" or "0"). Answers 1 when the record is stored, or was already
// completed by this token (a re-sent Complete); 0 when another claim or record
// holds the key. A key that is free (absent, or a lapsed lock) is completed as
// well: the operation ran, and nobody else claimed the key since.
var completeScript = redis.NewScript(fmt.Sprintf(nowLua, 4) + `
local h = redis.pcall('HMGET', KEYS[1], 'st', 'tok', 'ex', 'w')
if h['err'] then return 0 end
if not h[1] and not h[3] and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local live = tonumber(h[3]) and tonumber(h[3]) > now
local ours = h[2] == ARGV[1]
if live and h[1] == '2' and ours then return 1 end
if live and not (h[1] == '1' and ours) then return 0 end
if not (live and ours) then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'v', '1', 'fp', ARGV[6], 'ca', ARGV[7], 'tok', ARGV[1])
end
redis.call('HSET', KEYS[1], 'st', '2', 'resp', ARGV[2], 'ex', now + tonumber(ARGV[3]))
if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'u', '1') end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if h[4] == '1' then redis.call('PUBLISH', ARGV[5], KEYS[1]) end
return 1
`)

// resolveScript: KEYS[1]; ARGV response ("" deletes), ttl ms, now ms, channel.
// Answers 1 when the held unknown outcome was replaced (or deleted), 0 when no
// live record exists, 2 when the live record is not an unknown outcome, -1 for
// a foreign value.
var resolveScript = redis.NewScript(fmt.Sprintf(nowLua, 3) + `
local h = redis.pcall('HMGET', KEYS[1], 'v', 'st', 'ex', 'u')
if h['err'] then return -1 end
if not h[1] and not h[3] then
  if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
  return 0
end
if h[1] ~= '1' or not tonumber(h[3]) then return -1 end
if tonumber(h[3]) <= now then return 0 end
if h[2] ~= '2' or h[4] ~= '1' then return 2 end
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'resp', ARGV[1], 'ex', now + tonumber(ARGV[2]))
  redis.call('HDEL', KEYS[1], 'u')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('PUBLISH', ARGV[4], KEYS[1])
return 1
`)

// releaseScript: KEYS[1]; ARGV token, now ms, channel. Answers 1 when the key is
// free afterwards (released now, or nobody held it: a re-sent Release), 0 when
// another claim or a completed record holds it.
var releaseScript = redis.NewScript(fmt.Sprintf(nowLua, 2) + `
local h = redis.pcall('HMGET', KEYS[1], 'st', 'tok', 'ex', 'w')
if h['err'] then return 0 end
if not h[1] and not h[3] then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  return 1
end
local live = tonumber(h[3]) and tonumber(h[3]) > now
if live and (h[1] ~= '1' or h[2] ~= ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
if h[4] == '1' then redis.call('PUBLISH', ARGV[3], KEYS[1]) end
return 1
`)

// extendScript: KEYS[1]; ARGV token, lease ms, now ms. Answers 1 or 0.
var extendScript = redis.NewScript(fmt.Sprintf(nowLua, 3) + heldLua + `
redis.call('HSET', KEYS[1], 'ex', now + tonumber(ARGV[2]), 'ls', ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + ` + fmt.Sprint(restartKeepMS) + `)
return 1
`)

// getScript: KEYS[1]; ARGV now ms. Answers {0} when absent, {1, …} as lockScript.
var getScript = redis.NewScript(fmt.Sprintf(nowLua, 1) + readLua + `
if live then return {1, r[1], r[2], r[3], r[4], r[5], r[6]} end
return {0}
`)

// deleteScript: KEYS[1]; ARGV now ms, channel. Answers 1 when a live record was deleted.
var deleteScript = redis.NewScript(fmt.Sprintf(nowLua, 1) + readLua + `
if kind == 'hash' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
if live then return 1 end
return 0
`)
