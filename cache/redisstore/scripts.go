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
//	tok  claim token; kept once completed, so a re-sent Complete is recognised
//	ca   created-at, Unix milliseconds
//	ex   the record's expiry, Unix milliseconds (checked on read): a completed
//	     record's TTL; an in-flight claim's claim end plus its hold (Claim.Hold)
//	le   an in-flight claim's claim end, Unix milliseconds; from it until ex the
//	     lock is held as an unknown outcome (absent: le is ex, no hold)
//	lf   the token of the claim that found the claim's claim lapsed
//	resp msgpack-encoded response (completed); in flight, the claim's trace
//	     context (Claim.Trace, raw), when it has one
//	u    "1" when resp is a held unknown outcome (so Resolve need not decode it)
//	ls   an in-flight claim's claim, ms (restartGraceLua)
//	gr   when the first claim after a restart found the claim lapsed, ms (restartGraceLua)
//	w    "1" when a duplicate waits for this claim in flight (markScript): only then
//	     do Complete and Release announce the change
//	in   an in-flight claim's cache.Claim.Info (a completed record's is in resp;
//	     in kept after the completion, which deleting would cost one more command)
//	rc   how many replays were counted (countScript); rl the latest, ms
//
// PEXPIRE removes the key when ex passes (an in-flight claim restartKeepMS later); ex is checked as well so that an injected
// clock (ARGV now, 0 = the server's TIME) decides expiry consistently.
//
// Token mismatches are answered with a value (0), never an error: Go does not match
// on error text. A value under the key that is not one of our hashes answers -1.
//
// Every script is idempotent for its token: go-redis re-sends a call whose reply
// was lost with the connection, and the re-run must answer as the first did. A
// claim by the token that already holds the claim answers "claimed"; a Complete by
// the token that completed the record answers 2 (stored before: a success, as
// the first run's 1); a Release of a key nobody holds
// answers 1 (the key is free, as the Release wants it).

// nowLua sets `now`, in milliseconds, from ARGV[n] or the server clock.
const nowLua = `
local now = tonumber(ARGV[%d])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// readLua reads the record into r = {v, st, fp, ca, ex, resp, tok, le}; live is true when it
// exists and has not expired, lapsed when it is an in-flight claim whose claim
// lapsed and which is held (live: its hold has not ended), le its claim end.
// It answers -1 for a foreign value.
//
// A record always has v and ex, so HMGET alone tells a record from a missing key
// on the hot paths (replay, conflict); a WRONGTYPE error means a foreign value.
// Only when HMGET finds neither field does EXISTS tell a missing key (the first
// execution's path) from a foreign hash.
const readLua = `
local r = redis.pcall('HMGET', KEYS[1], 'v', 'st', 'fp', 'ca', 'ex', 'resp', 'tok', 'le')
if r['err'] then return {-1} end
local kind = 'hash'
if not r[1] and not r[5] then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
  kind = 'none'
elseif r[1] ~= '1' or not tonumber(r[5]) then
  return {-1}
end
local live = kind == 'hash' and tonumber(r[5]) > now
local le = tonumber(r[8]) or tonumber(r[5])
local lapsed = live and r[2] == '1' and le <= now
`

// restartGraceLua: a claim that lapsed while this server was down (or
// loading its data) is held for one more lease from the first claim that finds
// it after the restart. The instance that holds it may have finished its request
// during the outage and be retrying to store the response (complete_retry);
// without this, a client's retry, answered as soon as the server accepts
// commands, would claim the lapsed key first and run again. A lock carries its
// lease ('ls') for this; one last written before the server started is one that
// outlived a restart (uptime_in_seconds counts whole seconds, so the start is
// taken a second early: a claim written in the second before a restart may go
// without the grace, never one written after it). The grace starts at that first
// claim ('gr'), not at the server's start: loading a large append-only file takes
// seconds, during which no request is answered. Only with the server's clock
// (ARGV now = 0): an injected clock (tests) has no relation to the server's
// uptime. A promoted replica has been up all along, so a failover grants nothing;
// a server that refuses INFO grants nothing. In-flight locks are kept (PEXPIRE)
// for restartKeepMS past their claim, so a restart shorter than that finds them.
const restartGraceLua = `
if (lapsed or not live) and kind == 'hash' and r[2] == '1' and tonumber(ARGV[4]) == 0 then
  local g = redis.call('HMGET', KEYS[1], 'ls', 'gr')
  local ls, gr = tonumber(g[1]), tonumber(g[2])
  if ls and gr then
    if now < gr + ls then live, lapsed = true, false end
  elseif ls then
    local info = redis.pcall('INFO', 'server')
    local up = type(info) == 'string' and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
    if up and le - ls < now - (up + 1) * 1000 then
      redis.call('HSET', KEYS[1], 'gr', now)
      live, lapsed = true, false
    end
  end
end
`

// restartKeepMS is how long an in-flight claim's hash outlives its claim, for
// restartGraceLua: 5 minutes, complete_retry's default.
const restartKeepMS = 300000

// answerLua answers a live record: {1, v, st, fp, ca, ex, resp, now} (an
// in-flight claim's ex is its claim end), or for a lapsed claim {2, v, st, fp, ca,
// ex, resp, now, found}, found 1 when lf is tok (the claim's token; Get has none).
// now is the clock the script used, for the record's remaining life.
const answerLua = `
if lapsed then
  local found = tok and redis.call('HGET', KEYS[1], 'lf') == tok and 1 or 0
  return {2, r[1], r[2], r[3], r[4], r[5], r[6] or false, now, found}
end
local ex = r[5]
if r[2] == '1' and r[8] then ex = r[8] end
return {1, r[1], r[2], r[3], r[4], ex, r[6] or false, now}
`

// lockScript: KEYS[1]; ARGV token, fingerprint, lease ms, now ms, trace context,
// hold ms, info. Answers {0} when claimed (also when ARGV token already holds the
// live claim: a re-sent claim), or the live record as answerLua does. The
// first claim with the fingerprint of a lapsed claim marks it found (lf).
var lockScript = redis.NewScript(fmt.Sprintf(nowLua, 4) + readLua + restartGraceLua + `
local tok = ARGV[1]
if lapsed and r[3] == ARGV[2] then redis.call('HSETNX', KEYS[1], 'lf', tok) end
if live then
  if not lapsed and r[2] == '1' and r[7] == ARGV[1] then return {0} end
` + answerLua + `
end
if kind == 'hash' then redis.call('DEL', KEYS[1]) end
local hold = tonumber(ARGV[6]) or 0
redis.call('HSET', KEYS[1], 'v', '1', 'st', '1', 'tok', ARGV[1], 'fp', ARGV[2], 'ca', now, 'ex', now + tonumber(ARGV[3]) + hold, 'ls', ARGV[3])
if hold > 0 then redis.call('HSET', KEYS[1], 'le', now + tonumber(ARGV[3])) end
if ARGV[5] and ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'resp', ARGV[5]) end
if ARGV[7] and ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'in', ARGV[7]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + hold + ` + fmt.Sprint(restartKeepMS) + `)
return {0}
`)

// heldLua answers 0 unless ARGV[1] holds an in-flight claim on KEYS[1] whose
// lease has not lapsed; hold is the claim's hold (ex less its claim end).
const heldLua = `
local h = redis.call('HMGET', KEYS[1], 'st', 'tok', 'ex', 'le')
if h[1] ~= '1' or h[2] ~= ARGV[1] or not tonumber(h[3]) then return 0 end
local hold = 0
if tonumber(h[4]) then hold = tonumber(h[3]) - tonumber(h[4]) end
if tonumber(h[3]) - hold <= now then return 0 end
`

// Complete and release announce the change on the store's notification channel
// (an ARGV) when a duplicate waits for the claim (w, set by markScript); resolve
// and delete always, since every instance's local cache must hear of them. A
// PUBLISH inside the script costs no round trip, but reaches every subscribed
// instance: announcing every completion would send each to all of them.

// markScript: KEYS[1]. Marks an in-flight claim as waited for (Subscribe). Answers 1
// when the key holds a claim in flight (marked now or before), 0 otherwise. It
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
// fingerprint, created ms, unknown ("1" or "0"), ping (the local cache's,
// published on the channel; "" none). Answers 1 when the record is stored
// now, 2 when it was already completed by this token (a re-sent Complete: its
// life began earlier, so no local cache keeps it); 0 when another claim or
// record holds the key. The token's own claim is completed whether its claim lapsed or
// not (a lapsed one is held until then). A key that is free (absent, or a claim
// past its hold) is completed as well: the operation ran, and nobody else
// claimed the key since.
var completeScript = redis.NewScript(fmt.Sprintf(nowLua, 4) + `
local h = redis.pcall('HMGET', KEYS[1], 'st', 'tok', 'ex', 'w')
if h['err'] then return 0 end
if not h[1] and not h[3] and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local live = tonumber(h[3]) and tonumber(h[3]) > now
local ours = h[2] == ARGV[1]
if ARGV[9] and ARGV[9] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[9]) end
if live and h[1] == '2' and ours then return 2 end
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
// Answers 1 when the held unknown outcome (stored, or a lapsed claim) was
// replaced (or deleted), 0 when no live record exists, 2 when the live record
// is not an unknown outcome, -1 for a foreign value. A lapsed claim becomes a
// completed record, keeping its token, fingerprint and creation time.
var resolveScript = redis.NewScript(fmt.Sprintf(nowLua, 3) + `
local h = redis.pcall('HMGET', KEYS[1], 'v', 'st', 'ex', 'u', 'le')
if h['err'] then return -1 end
if not h[1] and not h[3] then
  if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
  return 0
end
if h[1] ~= '1' or not tonumber(h[3]) then return -1 end
if tonumber(h[3]) <= now then return 0 end
local lapsed = h[2] == '1' and tonumber(h[5]) and tonumber(h[5]) <= now
if not lapsed and (h[2] ~= '2' or h[4] ~= '1') then return 2 end
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'st', '2', 'resp', ARGV[1], 'ex', now + tonumber(ARGV[2]))
  redis.call('HDEL', KEYS[1], 'u', 'in')
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

// extendScript: KEYS[1]; ARGV token, lease ms, now ms. Answers 1 or 0. The
// hold moves with the claim.
var extendScript = redis.NewScript(fmt.Sprintf(nowLua, 3) + heldLua + `
redis.call('HSET', KEYS[1], 'ex', now + tonumber(ARGV[2]) + hold, 'ls', ARGV[2])
if hold > 0 then redis.call('HSET', KEYS[1], 'le', now + tonumber(ARGV[2])) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + hold + ` + fmt.Sprint(restartKeepMS) + `)
return 1
`)

// getScript: KEYS[1]; ARGV now ms. Answers {0} when absent, the record as
// answerLua does otherwise, followed by the operators' fields: in, rc, rl
// (or false each).
var getScript = redis.NewScript(fmt.Sprintf(nowLua, 1) + readLua + `
if live then
  local x = redis.call('HMGET', KEYS[1], 'in', 'rc', 'rl')
  if lapsed then
    return {2, r[1], r[2], r[3], r[4], r[5], r[6] or false, now, 0, x[1] or false, x[2] or false, x[3] or false}
  end
  local ex = r[5]
  if r[2] == '1' and r[8] then ex = r[8] end
  return {1, r[1], r[2], r[3], r[4], ex, r[6] or false, now, x[1] or false, x[2] or false, x[3] or false}
end
return {0}
`)

// countScript: KEYS[1]; ARGV created ms, replays, latest ms. Adds replays to
// the completed record created then (another record under the key, or none,
// is left alone: HINCRBY would create a hash without expiry). Announces
// nothing: a count changes no answer a local cache may hold.
var countScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'v', 'st', 'ca', 'rl')
if h[1] ~= '1' or h[2] ~= '2' or h[3] ~= ARGV[1] then return 0 end
redis.call('HINCRBY', KEYS[1], 'rc', ARGV[2])
if not tonumber(h[4]) or tonumber(h[4]) < tonumber(ARGV[3]) then redis.call('HSET', KEYS[1], 'rl', ARGV[3]) end
return 1
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
