package pgstore

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The table: one row per record.
//
//	key          the store key (a hex digest from the middleware; bytes, so any key works)
//	state        1 in flight, 2 completed
//	token        lock token; kept once completed, so a re-sent Complete is recognised
//	fingerprint  the request's fingerprint
//	created_at   when the first request was claimed
//	expires_at   when the record lapses: a completed record's TTL, an in-flight
//	             lock's lease end plus its hold (cache.Lock.Hold); every statement
//	             treats a row past it as absent
//	lease_until  an in-flight lock's lease end; from it until expires_at the lock
//	             is held as an unknown outcome (NULL: lease_until is expires_at)
//	found_by     the token of the claim that found the lock's lease lapsed
//	unknown      the response is a held unknown outcome (so Resolve need not decode it)
//	response     msgpack-encoded response (completed); in flight, the lock's trace
//	             context (Lock.Trace, raw) or NULL
//	waited       a duplicate waits for this in-flight lock (Subscribe): only then
//	             do complete and release announce the change (pg_notify)
//
// The index on expires_at makes the sweep's batches cheap; the partial index
// on key, of held unknown outcomes and locks (list.go), an operator's listing.
const schemaSQL = `CREATE TABLE IF NOT EXISTS {T} (
	key         bytea       PRIMARY KEY,
	state       smallint    NOT NULL,
	token       bytea       NOT NULL,
	fingerprint bytea       NOT NULL,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,
	unknown     boolean     NOT NULL DEFAULT false,
	response    bytea,
	waited      boolean     NOT NULL DEFAULT false,
	lease_until timestamptz,
	found_by    bytea
);
CREATE INDEX IF NOT EXISTS {I} ON {T} (expires_at);
CREATE INDEX IF NOT EXISTS {H} ON {T} (key) WHERE unknown OR state = 1;
`

// addColumnsSQL brings a table of an earlier version up to date: the columns
// waited, lease_until and found_by. A constant default (or none) makes each a
// change of the catalog only (no rewrite), but ALTER TABLE takes the table's
// exclusive lock even when the column exists, so the DO block checks first:
// New (which also bounds the lock's wait) and `idemproxy migrate --apply` on
// every deploy take the lock only when a column is missing.
const addColumnsSQL = `DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{T}'::regclass AND attname = 'waited' AND NOT attisdropped) THEN
		ALTER TABLE {T} ADD COLUMN waited boolean NOT NULL DEFAULT false;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{T}'::regclass AND attname = 'lease_until' AND NOT attisdropped) THEN
		ALTER TABLE {T} ADD COLUMN lease_until timestamptz, ADD COLUMN found_by bytea;
	END IF;
END $$;
`

// Statements that announce a change (pg_notify) return the number of
// announcements as a last column: a CTE that nothing reads is never run. The
// fenced statements all answer (ok, announcements); extend announces nothing.
//
// Complete and release announce only a change to a lock a duplicate waits for
// (waited, set by mark): a notifying transaction takes a database-wide lock
// from its commit until its WAL is flushed, so notifying every completion would
// make concurrent commits wait for one another, and send every completion to
// every listening instance. Resolve and delete always announce: every
// instance's local cache must hear of them.

// nowSQL is the statement's clock: the injected one (tests) or the server's.
// statement_timestamp() is fixed for the whole statement.
const nowSQL = `coalesce($%d::timestamptz, statement_timestamp())`

// queries are the statements for one table.
type queries struct {
	schema, addColumns, check                                              string
	claim, takeover, complete, release, extend, resolve, get, delete, mark string
	completeHeld, find, sweep                                              string
}

// Schema returns the DDL that creates table and its index, or brings a table
// of an earlier version up to date (what New runs unless Options.SkipCreateSchema,
// and `idemproxy migrate` prints). Every statement is idempotent.
func Schema(table string) (string, error) {
	if err := CheckTable(table); err != nil {
		return "", err
	}
	q := buildQueries(table)
	return q.schema + q.addColumns, nil
}

func buildQueries(table string) queries {
	parts := strings.Split(table, ".")
	t := pgx.Identifier(parts).Sanitize()
	idx := pgx.Identifier{parts[len(parts)-1] + "_expires_at"}.Sanitize()
	r := strings.NewReplacer("{T}", t, "{I}", idx, "{H}", heldIndex(parts),
		"{NOW1}", fmt.Sprintf(nowSQL, 1), "{NOW2}", fmt.Sprintf(nowSQL, 2), "{NOW3}", fmt.Sprintf(nowSQL, 3),
		"{NOW4}", fmt.Sprintf(nowSQL, 4), "{NOW5}", fmt.Sprintf(nowSQL, 5), "{NOW6}", fmt.Sprintf(nowSQL, 6), "{NOW8}", fmt.Sprintf(nowSQL, 8))
	return queries{
		schema:     r.Replace(schemaSQL) + reconcileReplacer(table).Replace(reconcileSchemaSQL),
		addColumns: r.Replace(addColumnsSQL),
		check:      r.Replace(`SELECT key, state, token, fingerprint, created_at, expires_at, unknown, response, waited, lease_until, found_by FROM {T} LIMIT 0`),

		// $1 key, $2 token, $3 fingerprint, $4 lease ms, $5 now, $6 trace context, $7 hold ms.
		// Read first: the row under the key is read by its primary key, and the
		// lock is inserted only when there is none (ON CONFLICT DO NOTHING, which
		// takes no row lock). A replay or a conflict therefore writes nothing:
		// no row lock, no WAL, no transaction id. Answers (outcome, the row's
		// state, fingerprint, created, expires, response, now): outcome 0 claimed
		// (also for the token that holds the live lock: a re-sent claim), 1 a
		// live record (a lock's expires is its lease end), 2 an expired row (the
		// caller takes it over with takeover), 3 a lock whose lease lapsed,
		// held (the caller reads it with find).
		// No row at all: another transaction inserted the key after this
		// statement's snapshot; the caller runs it again.
		claim: r.Replace(`WITH c AS (SELECT {NOW5} AS now),
cur AS (SELECT r.state, r.token = $2 AS mine, r.fingerprint, r.created_at, r.expires_at, r.response,
	coalesce(r.lease_until, r.expires_at) AS lease_until FROM {T} r WHERE r.key = $1),
ins AS (
	INSERT INTO {T} (key, state, token, fingerprint, created_at, expires_at, unknown, response, lease_until)
	SELECT $1, 1, $2, $3, c.now, c.now + ($4::bigint + $7::bigint) * interval '1 millisecond', false, $6::bytea,
		c.now + $4::bigint * interval '1 millisecond' FROM c
	WHERE NOT EXISTS (SELECT 1 FROM cur)
	ON CONFLICT (key) DO NOTHING
	RETURNING 1
)
SELECT 0::smallint, 0::smallint, ''::bytea, c.now, c.now, NULL::bytea, c.now FROM ins, c
UNION ALL
SELECT CASE WHEN cur.expires_at <= c.now THEN 2 WHEN cur.state = 1 AND cur.lease_until <= c.now THEN 3
		WHEN cur.state = 1 AND cur.mine THEN 0 ELSE 1 END::smallint,
	cur.state, cur.fingerprint, cur.created_at, CASE WHEN cur.state = 1 THEN cur.lease_until ELSE cur.expires_at END,
	cur.response, c.now FROM cur, c`),

		// $1 key, $2 token, $3 fingerprint, $4 now. Reads a lock whose lease
		// lapsed (claim answered 3), marking it found by the token when it is
		// the first claim of the same request to find it. Answers (lapsed,
		// found, state, fingerprint, created, expires, response, now): lapsed
		// false when the row is no such lock any more (completed meanwhile: the
		// row as claim would answer it); no row when it expired meanwhile.
		find: r.Replace(`WITH c AS (SELECT {NOW4} AS now),
u AS (UPDATE {T} r SET found_by = $2 FROM c WHERE r.key = $1 AND r.state = 1 AND r.found_by IS NULL AND r.fingerprint = $3
	AND coalesce(r.lease_until, r.expires_at) <= c.now AND r.expires_at > c.now RETURNING 1)
SELECT r.state = 1 AND coalesce(r.lease_until, r.expires_at) <= c.now, coalesce(r.found_by = $2, false) OR EXISTS (SELECT 1 FROM u),
	r.state, r.fingerprint, r.created_at, CASE WHEN r.state = 1 AND coalesce(r.lease_until, r.expires_at) > c.now THEN r.lease_until ELSE r.expires_at END,
	r.response, c.now FROM {T} r, c WHERE r.key = $1 AND r.expires_at > c.now`),

		// $1 key, $2 token, $3 fingerprint, $4 lease ms, $5 now, $6 trace context,
		// $7 hold ms. Takes over an expired row (claim answered 2): claims the
		// key if it is free (absent or expired) or held by the token's live lock
		// (a re-sent claim); otherwise returns the live row and writes nothing.
		// Answers as claim (a lock whose lease lapsed: 3).
		takeover: r.Replace(`WITH c AS (SELECT {NOW5} AS now),
ins AS (
	INSERT INTO {T} AS r (key, state, token, fingerprint, created_at, expires_at, unknown, response, lease_until)
	SELECT $1, 1, $2, $3, c.now, c.now + ($4::bigint + $7::bigint) * interval '1 millisecond', false, $6::bytea,
		c.now + $4::bigint * interval '1 millisecond' FROM c
	ON CONFLICT (key) DO UPDATE SET state = 1, token = excluded.token, fingerprint = excluded.fingerprint,
		created_at = excluded.created_at, expires_at = excluded.expires_at, unknown = false, response = excluded.response,
		waited = false, lease_until = excluded.lease_until, found_by = NULL
	WHERE r.expires_at <= excluded.created_at
		OR (r.state = 1 AND r.token = excluded.token AND coalesce(r.lease_until, r.expires_at) > excluded.created_at)
	RETURNING 1
)
SELECT 0::smallint, 0::smallint, ''::bytea, c.now, c.now, NULL::bytea, c.now FROM ins, c
UNION ALL
SELECT CASE WHEN r.state = 1 AND coalesce(r.lease_until, r.expires_at) <= c.now THEN 3 ELSE 1 END::smallint,
	r.state, r.fingerprint, r.created_at, CASE WHEN r.state = 1 THEN coalesce(r.lease_until, r.expires_at) ELSE r.expires_at END,
	r.response, c.now FROM {T} r, c
WHERE r.key = $1 AND r.expires_at > c.now AND NOT EXISTS (SELECT 1 FROM ins)`),

		// $1 key, $2 token, $3 fingerprint, $4 created, $5 ttl ms, $6 response,
		// $7 unknown, $8 now, $9 channels. True when stored: over the token's own
		// lock (its lease lapsed or not), or on a free key (the lock expired
		// during an outage and nobody claimed it), or already completed by this
		// token (a re-sent Complete, which writes nothing).
		complete: r.Replace(`WITH c AS (SELECT {NOW8} AS now),
up AS (
	INSERT INTO {T} AS r (key, state, token, fingerprint, created_at, expires_at, unknown, response)
	SELECT $1, 2, $2, $3, $4, c.now + $5::bigint * interval '1 millisecond', $7, $6 FROM c
	ON CONFLICT (key) DO UPDATE SET state = 2, token = excluded.token, unknown = excluded.unknown,
		response = excluded.response, expires_at = excluded.expires_at,
		fingerprint = CASE WHEN r.state = 1 AND r.token = excluded.token AND r.expires_at > (SELECT now FROM c)
			THEN r.fingerprint ELSE excluded.fingerprint END,
		created_at = CASE WHEN r.state = 1 AND r.token = excluded.token AND r.expires_at > (SELECT now FROM c)
			THEN r.created_at ELSE excluded.created_at END
	WHERE r.expires_at <= (SELECT now FROM c) OR (r.state = 1 AND r.token = excluded.token)
	RETURNING r.waited
),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($9::text[]) ch, up WHERE up.waited)
SELECT EXISTS (SELECT 1 FROM up)
	OR EXISTS (SELECT 1 FROM {T} r, c WHERE r.key = $1 AND r.state = 2 AND r.token = $2 AND r.expires_at > c.now)
	, (SELECT count(*) FROM n)`),

		// $1 key, $2 token, $3 response, $4 unknown, $5 ttl ms, $6 now, $7
		// channels. The common Complete: the token's own live lock, a plain
		// UPDATE of the row it holds (no speculative insert, no subplans), which
		// writes what complete writes in that case. False in every other case,
		// which complete then decides (a lapsed or absent lock, a re-sent
		// Complete, another holder).
		completeHeld: r.Replace(`WITH c AS (SELECT {NOW6} AS now),
up AS (UPDATE {T} r SET state = 2, response = $3, unknown = $4, expires_at = c.now + $5::bigint * interval '1 millisecond'
	FROM c WHERE r.key = $1 AND r.state = 1 AND r.token = $2 AND r.expires_at > c.now
	RETURNING r.waited),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($7::text[]) ch, up WHERE up.waited)
SELECT EXISTS (SELECT 1 FROM up), (SELECT count(*) FROM n)`),

		// $1 key, $2 token, $3 now, $4 channels. True when the key is free
		// afterwards: released now, lapsed, or nobody held it (a re-sent Release).
		release: r.Replace(`WITH c AS (SELECT {NOW3} AS now),
d AS (DELETE FROM {T} r USING c WHERE r.key = $1 AND (r.expires_at <= c.now OR (r.state = 1 AND r.token = $2)) RETURNING r.waited),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($4::text[]) ch, d WHERE d.waited)
SELECT EXISTS (SELECT 1 FROM d)
	OR NOT EXISTS (SELECT 1 FROM {T} r, c WHERE r.key = $1 AND r.expires_at > c.now)
	, (SELECT count(*) FROM n)`),

		// $1 key, $2 token, $3 lease ms, $4 now. True when the token's lock,
		// its lease not lapsed, was renewed; its hold moves with the lease.
		extend: r.Replace(`WITH c AS (SELECT {NOW4} AS now),
u AS (UPDATE {T} r SET lease_until = c.now + $3::bigint * interval '1 millisecond',
		expires_at = c.now + $3::bigint * interval '1 millisecond' + (r.expires_at - coalesce(r.lease_until, r.expires_at)) FROM c
	WHERE r.key = $1 AND r.state = 1 AND r.token = $2 AND coalesce(r.lease_until, r.expires_at) > c.now RETURNING 1)
SELECT EXISTS (SELECT 1 FROM u), 0::bigint`),

		// $1 key, $2 response (NULL deletes), $3 ttl ms, $4 now, $5 channels.
		// 1 when the held unknown outcome (stored, or a lock whose lease
		// lapsed) was replaced or deleted, 0 when no live record exists, 2 when
		// the live record is something else. A lapsed lock becomes a completed
		// record, keeping its token, fingerprint and creation time.
		resolve: r.Replace(`WITH c AS (SELECT {NOW4} AS now),
cur AS (SELECT 1 FROM {T} r, c WHERE r.key = $1 AND r.expires_at > c.now),
u AS (UPDATE {T} r SET state = 2, response = $2, unknown = false, expires_at = c.now + $3::bigint * interval '1 millisecond' FROM c
	WHERE $2::bytea IS NOT NULL AND r.key = $1 AND r.expires_at > c.now
		AND (r.state = 2 AND r.unknown OR r.state = 1 AND coalesce(r.lease_until, r.expires_at) <= c.now) RETURNING 1),
d AS (DELETE FROM {T} r USING c
	WHERE $2::bytea IS NULL AND r.key = $1 AND r.expires_at > c.now
		AND (r.state = 2 AND r.unknown OR r.state = 1 AND coalesce(r.lease_until, r.expires_at) <= c.now) RETURNING 1),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($5::text[]) ch, (SELECT 1 FROM u UNION ALL SELECT 1 FROM d) x)
SELECT CASE WHEN EXISTS (SELECT 1 FROM u) OR EXISTS (SELECT 1 FROM d) THEN 1
	WHEN NOT EXISTS (SELECT 1 FROM cur) THEN 0 ELSE 2 END, (SELECT count(*) FROM n)`),

		// $1 key. Marks an in-flight lock as waited for (Subscribe), so its
		// complete or release announces itself; writes nothing when it is
		// marked already, or is no lock.
		mark: r.Replace(`UPDATE {T} SET waited = true WHERE key = $1 AND state = 1 AND NOT waited`),

		// $1 key, $2 now. Answers (lapsed, state, fingerprint, created,
		// expires, response): lapsed for a lock whose lease lapsed, held (its
		// expires is the hold's end; a live lock's, its lease end).
		get: r.Replace(`WITH c AS (SELECT {NOW2} AS now)
SELECT r.state = 1 AND coalesce(r.lease_until, r.expires_at) <= c.now, r.state, r.fingerprint, r.created_at,
	CASE WHEN r.state = 1 AND coalesce(r.lease_until, r.expires_at) > c.now THEN r.lease_until ELSE r.expires_at END, r.response
FROM {T} r, c WHERE r.key = $1 AND r.expires_at > c.now`),

		// $1 key, $2 now, $3 channels. True when a live record was deleted (a
		// lapsed one is deleted too, and answers false).
		delete: r.Replace(`WITH d AS (DELETE FROM {T} WHERE key = $1 RETURNING expires_at > {NOW2} AS live),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($3::text[]) ch, d WHERE live)
SELECT coalesce((SELECT bool_or(live) FROM d), false), (SELECT count(*) FROM n)`),

		// $1 batch size, $2 now. Deletes up to $1 expired rows, skipping rows
		// another transaction has locked, in the order of the index.
		sweep: r.Replace(`DELETE FROM {T} WHERE key IN (
	SELECT key FROM {T} WHERE expires_at <= {NOW2} ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`),
	}
}
