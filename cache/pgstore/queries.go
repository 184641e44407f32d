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
//	token        claim token; kept once completed, so a re-sent Complete is recognised
//	fingerprint  the request's fingerprint
//	created_at   when the first request was claimed
//	expires_at   when the record lapses: a completed record's TTL, an in-flight
//	             lock's claim end plus its hold (cache.Claim.Hold); every statement
//	             treats a row past it as absent
//	lease_until  an in-flight claim's claim end; from it until expires_at the claim
//	             is held as an unknown outcome (NULL: lease_until is expires_at)
//	found_by     the token of the claim that found the claim's claim lapsed
//	unknown      the response is a held unknown outcome (so Resolve need not decode it)
//	response     msgpack-encoded response (completed); in flight, the claim's trace
//	             context (Claim.Trace, raw) or NULL
//	waited       a duplicate waits for this in-flight claim (Subscribe): only then
//	             do complete and release announce the change (pg_notify)
//	sweep_at     when the sweep next looks at the row (its index, <table>_sweep_at,
//	             is the sweep's): a claim's is its claim end plus the TTL its
//	             record will have (cache.Claim.TTL), so the completion, which
//	             lands within the claim, need not move it; the sweep deletes the
//	             row then if it expired, and otherwise moves sweep_at to
//	             expires_at. -infinity (the default) in rows an earlier version
//	             inserts: the sweep looks at them first; the rows there when the
//	             column was added read the latest expiry among them (addColumnsSQL).
//	info         an in-flight claim's cache.Claim.Info, or NULL (a completed
//	             record's is in its response)
//	replays      how many replays were counted (Store.CountReplay), and
//	last_replay  the latest; counts older than created_at (left by an earlier
//	             version's takeover of the row) read as none
//
// Completing a claim is a HOT update: no index holds a column the completion
// changes (state, response, unknown, expires_at; sweep_at keeps its value),
// and the table's fillfactor leaves each page room for the completed rows
// of its claims. Hence no index on expires_at or state: the sweep reads
// sweep_at's, and the held listing scans the primary key (list.go).
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
	found_by    bytea,
	sweep_at    timestamptz NOT NULL DEFAULT '-infinity',
	info        bytea,
	replays     bigint      NOT NULL DEFAULT 0,
	last_replay timestamptz
) WITH (fillfactor = {FF});
`

// addColumnsSQL brings a table of an earlier version up to date: the columns
// waited, lease_until, found_by, sweep_at, info, replays and last_replay, and
// the fillfactor. A constant
// default (or none) makes each column a change of the catalog only (no
// rewrite). The rows already there read sweep_at as the latest expiry among
// them (the default the column is added with; the index on expires_at of
// that version finds it), so the sweep looks at them once, when all have
// expired, instead of writing each; rows an earlier version inserts later
// get -infinity, the default from then on. ALTER TABLE takes the table's
// exclusive lock even when the column exists, so the DO block checks first:
// New (which also bounds the claim's wait) and `idemproxy migrate --apply` on
// every deploy take the claim only when a column is missing. The fillfactor
// (a claim that blocks no read or write, and no rewrite: it applies to pages
// filled from then on) is set only on a table that has none, so an
// operator's own stays.
const addColumnsSQL = `DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{T}'::regclass AND attname = 'waited' AND NOT attisdropped) THEN
		ALTER TABLE {T} ADD COLUMN waited boolean NOT NULL DEFAULT false;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{T}'::regclass AND attname = 'lease_until' AND NOT attisdropped) THEN
		ALTER TABLE {T} ADD COLUMN lease_until timestamptz, ADD COLUMN found_by bytea;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{T}'::regclass AND attname = 'sweep_at' AND NOT attisdropped) THEN
		LOCK TABLE {T} IN ACCESS EXCLUSIVE MODE;
		EXECUTE format('ALTER TABLE {T} ADD COLUMN sweep_at timestamptz NOT NULL DEFAULT %L',
			coalesce((SELECT max(expires_at) FROM {T}), '-infinity'));
		ALTER TABLE {T} ALTER COLUMN sweep_at SET DEFAULT '-infinity';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{T}'::regclass AND attname = 'info' AND NOT attisdropped) THEN
		ALTER TABLE {T} ADD COLUMN info bytea, ADD COLUMN replays bigint NOT NULL DEFAULT 0, ADD COLUMN last_replay timestamptz;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_class, unnest(reloptions) AS o WHERE oid = '{T}'::regclass AND o LIKE 'fillfactor=%') THEN
		ALTER TABLE {T} SET (fillfactor = {FF});
	END IF;
END $$;
`

// indexesSQL creates the sweep's index, only when it is missing (CREATE
// INDEX IF NOT EXISTS would take the table's claim first): building it blocks
// the table's writes for as long as it reads the table.
const indexesSQL = `DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = '{T}'::regclass AND c.relname = '{SN}') THEN
		CREATE INDEX {S} ON {T} (sweep_at);
	END IF;
END $$;
`

// dropIndexesSQL drops the indexes of earlier versions, if there, on
// expires_at and on the held rows (key WHERE unknown OR state = 1), which
// kept every completion from being a HOT update: each takes the table's
// exclusive lock for a moment. Instances of an earlier version still work
// without them: their sweep and their held listing read the table instead
// (docs/upgrading.md). migrate runs it in a transaction of its own, so the
// index built before stays built when this claim is not granted.
const dropIndexesSQL = `DO $$ DECLARE ix text; BEGIN
	FOR ix IN SELECT format('%I.%I', n.nspname, c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE i.indrelid = '{T}'::regclass AND c.relname IN ('{IN}', '{HN}') LOOP
		EXECUTE 'DROP INDEX ' || ix;
	END LOOP;
END $$;
`

// Fillfactor is the table's fillfactor: inserts fill a page to this
// percentage, which leaves the rest for the completed rows of its claims (a
// HOT update must fit on the old row's page). Measured in BENCHMARKS.md.
const Fillfactor = 80

// Statements that announce a change (pg_notify) return the number of
// announcements as a last column: a CTE that nothing reads is never run. The
// fenced statements all answer (ok, announcements); extend announces nothing.
//
// Complete and release announce only a change to a claim a duplicate waits for
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
	schema, addColumns, indexes, dropIndexes, check                        string
	claim, takeover, complete, release, extend, resolve, get, delete, mark string
	completeHeld, find, sweep, count                                       string
}

// Schema returns the DDL that creates table and its index, or brings a table
// of an earlier version up to date (what New runs unless Options.SkipCreateSchema,
// and `idemproxy migrate` prints): the tables, the columns, then the indexes.
// Every statement is idempotent.
func Schema(table string) (string, error) {
	if err := CheckTable(table); err != nil {
		return "", err
	}
	q := buildQueries(table)
	return q.schema + q.addColumns + q.indexes + q.dropIndexes, nil
}

func buildQueries(table string) queries {
	parts := strings.Split(table, ".")
	t := pgx.Identifier(parts).Sanitize()
	last := parts[len(parts)-1]
	r := strings.NewReplacer("{T}", t, "{S}", pgx.Identifier{last + "_sweep_at"}.Sanitize(), "{SN}", last+"_sweep_at",
		"{IN}", last+"_expires_at", "{HN}", last+"_held", "{FF}", fmt.Sprint(Fillfactor),
		"{NOW1}", fmt.Sprintf(nowSQL, 1), "{NOW2}", fmt.Sprintf(nowSQL, 2), "{NOW3}", fmt.Sprintf(nowSQL, 3),
		"{NOW4}", fmt.Sprintf(nowSQL, 4), "{NOW5}", fmt.Sprintf(nowSQL, 5), "{NOW6}", fmt.Sprintf(nowSQL, 6), "{NOW8}", fmt.Sprintf(nowSQL, 8))
	return queries{
		schema:      r.Replace(schemaSQL) + reconcileReplacer(table).Replace(reconcileSchemaSQL),
		addColumns:  r.Replace(addColumnsSQL),
		indexes:     r.Replace(indexesSQL),
		dropIndexes: r.Replace(dropIndexesSQL),
		check:       r.Replace(`SELECT key, state, token, fingerprint, created_at, expires_at, unknown, response, waited, lease_until, found_by, sweep_at, info, replays, last_replay FROM {T} LIMIT 0`),

		// $1 key, $2 token, $3 fingerprint, $4 lease ms, $5 now, $6 trace context, $7 hold ms,
		// $8 the record's TTL in ms (sweep_at: the claim end plus it), $9 info. Read
		// first: the row under the key is read by its primary key, and the
		// lock is inserted only when there is none (ON CONFLICT DO NOTHING, which
		// takes no row lock). A replay or a conflict therefore writes nothing:
		// no row lock, no WAL, no transaction id. Answers (outcome, the row's
		// state, fingerprint, created, expires, response, now): outcome 0 claimed
		// (also for the token that holds the live claim: a re-sent claim), 1 a
		// live record (a claim's expires is its claim end), 2 an expired row (the
		// caller takes it over with takeover), 3 a claim that lapsed,
		// held (the caller reads it with find).
		// No row at all: another transaction inserted the key after this
		// statement's snapshot; the caller runs it again.
		claim: r.Replace(`WITH c AS (SELECT {NOW5} AS now),
cur AS (SELECT r.state, r.token = $2 AS mine, r.fingerprint, r.created_at, r.expires_at, r.response,
	coalesce(r.lease_until, r.expires_at) AS lease_until FROM {T} r WHERE r.key = $1),
ins AS (
	INSERT INTO {T} (key, state, token, fingerprint, created_at, expires_at, unknown, response, lease_until, sweep_at, info)
	SELECT $1, 1, $2, $3, c.now, c.now + ($4::bigint + $7::bigint) * interval '1 millisecond', false, $6::bytea,
		c.now + $4::bigint * interval '1 millisecond', c.now + ($4::bigint + $8::bigint) * interval '1 millisecond', $9::bytea FROM c
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

		// $1 key, $2 token, $3 fingerprint, $4 now. Reads a claim whose claim
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
		// $7 hold ms, $8 the record's TTL in ms, $9 info. Takes over an expired row
		// (claim answered 2): claims the key if it is free (absent or expired) or held by the token's live claim
		// (a re-sent claim); otherwise returns the live row and writes nothing.
		// Answers as claim (a claim that lapsed: 3).
		takeover: r.Replace(`WITH c AS (SELECT {NOW5} AS now),
ins AS (
	INSERT INTO {T} AS r (key, state, token, fingerprint, created_at, expires_at, unknown, response, lease_until, sweep_at, info)
	SELECT $1, 1, $2, $3, c.now, c.now + ($4::bigint + $7::bigint) * interval '1 millisecond', false, $6::bytea,
		c.now + $4::bigint * interval '1 millisecond', c.now + ($4::bigint + $8::bigint) * interval '1 millisecond', $9::bytea FROM c
	ON CONFLICT (key) DO UPDATE SET state = 1, token = excluded.token, fingerprint = excluded.fingerprint,
		created_at = excluded.created_at, expires_at = excluded.expires_at, unknown = false, response = excluded.response,
		waited = false, lease_until = excluded.lease_until, found_by = NULL, sweep_at = excluded.sweep_at,
		info = excluded.info, replays = 0, last_replay = NULL
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
		// lock (its claim lapsed or not), or on a free key (the claim expired
		// during an outage and nobody claimed it), or already completed by this
		// token (a re-sent Complete, which writes nothing). sweep_at is the
		// new expiry.
		complete: r.Replace(`WITH c AS (SELECT {NOW8} AS now),
up AS (
	INSERT INTO {T} AS r (key, state, token, fingerprint, created_at, expires_at, unknown, response, sweep_at)
	SELECT $1, 2, $2, $3, $4, c.now + $5::bigint * interval '1 millisecond', $7, $6, c.now + $5::bigint * interval '1 millisecond' FROM c
	ON CONFLICT (key) DO UPDATE SET state = 2, token = excluded.token, unknown = excluded.unknown,
		response = excluded.response, expires_at = excluded.expires_at, sweep_at = excluded.sweep_at,
		info = NULL, replays = 0, last_replay = NULL,
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
		// channels, $8 the local cache's ping ('' none), notified on the
		// first channel whatever the row. The common Complete: the token's own live claim, a plain
		// UPDATE of the row it holds (no speculative insert, no subplans), which
		// writes what complete writes in that case. False in every other case,
		// which complete then decides (a lapsed or absent lock, a re-sent
		// Complete, another holder). It keeps sweep_at when that is no
		// earlier than the new expiry and no later than the claim end plus
		// the TTL (the claim's own sweep_at, when the claim knew the TTL and
		// the claim holds): the update then changes no indexed column and is
		// a HOT update. Otherwise sweep_at is the new expiry.
		completeHeld: r.Replace(`WITH c AS (SELECT {NOW6} AS now, {NOW6} + $5::bigint * interval '1 millisecond' AS exp),
up AS (UPDATE {T} r SET state = 2, response = $3, unknown = $4, expires_at = c.exp, info = NULL,
		sweep_at = CASE WHEN r.sweep_at >= c.exp AND r.sweep_at <= greatest(r.lease_until, c.now) + $5::bigint * interval '1 millisecond'
			THEN r.sweep_at ELSE c.exp END
	FROM c WHERE r.key = $1 AND r.state = 1 AND r.token = $2 AND r.expires_at > c.now
	RETURNING r.waited),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($7::text[]) ch, up WHERE up.waited),
p AS (SELECT pg_notify(($7::text[])[1], $8::text) WHERE $8::text <> '')
SELECT EXISTS (SELECT 1 FROM up), (SELECT count(*) FROM n) + (SELECT count(*) FROM p)`),

		// $1 key, $2 token, $3 now, $4 channels. True when the key is free
		// afterwards: released now, lapsed, or nobody held it (a re-sent Release).
		release: r.Replace(`WITH c AS (SELECT {NOW3} AS now),
d AS (DELETE FROM {T} r USING c WHERE r.key = $1 AND (r.expires_at <= c.now OR (r.state = 1 AND r.token = $2)) RETURNING r.waited),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($4::text[]) ch, d WHERE d.waited)
SELECT EXISTS (SELECT 1 FROM d)
	OR NOT EXISTS (SELECT 1 FROM {T} r, c WHERE r.key = $1 AND r.expires_at > c.now)
	, (SELECT count(*) FROM n)`),

		// $1 key, $2 token, $3 lease ms, $4 now. True when the token's claim,
		// its claim not lapsed, was renewed; its hold and its sweep_at move with
		// the claim (-infinity stays).
		extend: r.Replace(`WITH c AS (SELECT {NOW4} AS now),
u AS (UPDATE {T} r SET lease_until = c.now + $3::bigint * interval '1 millisecond',
		expires_at = c.now + $3::bigint * interval '1 millisecond' + (r.expires_at - coalesce(r.lease_until, r.expires_at)),
		sweep_at = r.sweep_at + (c.now + $3::bigint * interval '1 millisecond' - coalesce(r.lease_until, r.expires_at)) FROM c
	WHERE r.key = $1 AND r.state = 1 AND r.token = $2 AND coalesce(r.lease_until, r.expires_at) > c.now RETURNING 1)
SELECT EXISTS (SELECT 1 FROM u), 0::bigint`),

		// $1 key, $2 response (NULL deletes), $3 ttl ms, $4 now, $5 channels.
		// 1 when the held unknown outcome (stored, or a claim whose claim
		// lapsed) was replaced or deleted, 0 when no live record exists, 2 when
		// the live record is something else. A lapsed claim becomes a completed
		// record, keeping its token, fingerprint and creation time.
		resolve: r.Replace(`WITH c AS (SELECT {NOW4} AS now),
cur AS (SELECT 1 FROM {T} r, c WHERE r.key = $1 AND r.expires_at > c.now),
u AS (UPDATE {T} r SET state = 2, response = $2, unknown = false, info = NULL, expires_at = c.now + $3::bigint * interval '1 millisecond',
		sweep_at = c.now + $3::bigint * interval '1 millisecond' FROM c
	WHERE $2::bytea IS NOT NULL AND r.key = $1 AND r.expires_at > c.now
		AND (r.state = 2 AND r.unknown OR r.state = 1 AND coalesce(r.lease_until, r.expires_at) <= c.now) RETURNING 1),
d AS (DELETE FROM {T} r USING c
	WHERE $2::bytea IS NULL AND r.key = $1 AND r.expires_at > c.now
		AND (r.state = 2 AND r.unknown OR r.state = 1 AND coalesce(r.lease_until, r.expires_at) <= c.now) RETURNING 1),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($5::text[]) ch, (SELECT 1 FROM u UNION ALL SELECT 1 FROM d) x)
SELECT CASE WHEN EXISTS (SELECT 1 FROM u) OR EXISTS (SELECT 1 FROM d) THEN 1
	WHEN NOT EXISTS (SELECT 1 FROM cur) THEN 0 ELSE 2 END, (SELECT count(*) FROM n)`),

		// $1 key. Marks an in-flight claim as waited for (Subscribe), so its
		// complete or release announces itself; writes nothing when it is
		// marked already, or is no claim.
		mark: r.Replace(`UPDATE {T} SET waited = true WHERE key = $1 AND state = 1 AND NOT waited`),

		// $1 key, $2 now. Answers (lapsed, state, fingerprint, created,
		// expires, response, info, replays, last replay): lapsed for a claim
		// that lapsed, held (its expires is the hold's end; a live claim's,
		// its claim end).
		get: r.Replace(`WITH c AS (SELECT {NOW2} AS now)
SELECT r.state = 1 AND coalesce(r.lease_until, r.expires_at) <= c.now, r.state, r.fingerprint, r.created_at,
	CASE WHEN r.state = 1 AND coalesce(r.lease_until, r.expires_at) > c.now THEN r.lease_until ELSE r.expires_at END, r.response,
	r.info, CASE WHEN r.last_replay >= r.created_at THEN r.replays ELSE 0 END, r.last_replay
FROM {T} r, c WHERE r.key = $1 AND r.expires_at > c.now`),

		// $1 keys, $2 their records' creation, $3 replays, $4 the latest.
		// Adds each count to the completed record created then (another
		// record under the key is left alone). Announces nothing: a count
		// changes no answer a local cache may hold.
		count: r.Replace(`UPDATE {T} r SET replays = CASE WHEN r.last_replay >= r.created_at THEN r.replays ELSE 0 END + c.n,
	last_replay = greatest(r.last_replay, c.at)
FROM unnest($1::bytea[], $2::timestamptz[], $3::bigint[], $4::timestamptz[]) AS c(key, created, n, at)
WHERE r.key = c.key AND r.created_at = c.created AND r.state = 2`),

		// $1 key, $2 now, $3 channels. True when a live record was deleted (a
		// lapsed one is deleted too, and answers false).
		delete: r.Replace(`WITH d AS (DELETE FROM {T} WHERE key = $1 RETURNING expires_at > {NOW2} AS live),
n AS (SELECT pg_notify(ch, encode($1, 'hex')) FROM unnest($3::text[]) ch, d WHERE live)
SELECT coalesce((SELECT bool_or(live) FROM d), false), (SELECT count(*) FROM n)`),

		// $1 batch size, $2 now. Looks at up to $1 rows whose sweep_at has
		// come, in the order of its index, skipping rows another transaction
		// has locked: deletes those that expired and moves the others'
		// sweep_at to their expiry (a claim held after its claim lapsed, a row
		// an earlier version wrote), so that no row is looked at again before
		// then. Answers (deleted, moved).
		sweep: r.Replace(`WITH c AS (SELECT {NOW2} AS now),
due AS (SELECT r.key FROM {T} r WHERE r.sweep_at <= {NOW2} ORDER BY r.sweep_at LIMIT $1 FOR UPDATE OF r SKIP LOCKED),
d AS (DELETE FROM {T} r USING due, c WHERE r.key = due.key AND r.expires_at <= c.now RETURNING 1),
m AS (UPDATE {T} r SET sweep_at = r.expires_at FROM due, c WHERE r.key = due.key AND r.expires_at > c.now RETURNING 1)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM m)`),
	}
}
