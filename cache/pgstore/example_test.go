package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A Go service on PostgreSQL. New creates the table if it is missing (or, with
// Options.SkipCreateSchema, checks that it exists), so a database that cannot be
// reached fails here rather than at the first request.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app?sslmode=disable&pool_max_conns=32")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, pgstore.Options{Table: "idem.records"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // before the pool: it stops the sweeper and the listener
	idem, err := middleware.New(store, func(s *middleware.Settings) { s.RequireKey = true })
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", idem.Wrap(http.NotFoundHandler())))
}

// The DDL of a table, for a migration tool (what `idemproxy migrate` prints).
func ExampleSchema() {
	ddl, err := pgstore.Schema("idem_records")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(ddl)
	// Output:
	// CREATE TABLE IF NOT EXISTS "idem_records" (
	// 	key         bytea       PRIMARY KEY,
	// 	state       smallint    NOT NULL,
	// 	token       bytea       NOT NULL,
	// 	fingerprint bytea       NOT NULL,
	// 	created_at  timestamptz NOT NULL,
	// 	expires_at  timestamptz NOT NULL,
	// 	unknown     boolean     NOT NULL DEFAULT false,
	// 	response    bytea,
	// 	waited      boolean     NOT NULL DEFAULT false,
	// 	lease_until timestamptz,
	// 	found_by    bytea,
	// 	sweep_at    timestamptz NOT NULL DEFAULT '-infinity',
	// 	info        bytea,
	// 	replays     bigint      NOT NULL DEFAULT 0,
	// 	last_replay timestamptz
	// ) WITH (fillfactor = 80);
	// CREATE TABLE IF NOT EXISTS "idem_records_reconcile" (
	// 	key   bytea       PRIMARY KEY,
	// 	due   timestamptz NOT NULL,
	// 	token bytea,
	// 	until timestamptz NOT NULL,
	// 	job   bytea       NOT NULL
	// );
	// CREATE INDEX IF NOT EXISTS "idem_records_reconcile_due" ON "idem_records_reconcile" (due);
	// DO $$ BEGIN
	// 	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '"idem_records"'::regclass AND attname = 'waited' AND NOT attisdropped) THEN
	// 		ALTER TABLE "idem_records" ADD COLUMN waited boolean NOT NULL DEFAULT false;
	// 	END IF;
	// 	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '"idem_records"'::regclass AND attname = 'lease_until' AND NOT attisdropped) THEN
	// 		ALTER TABLE "idem_records" ADD COLUMN lease_until timestamptz, ADD COLUMN found_by bytea;
	// 	END IF;
	// 	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '"idem_records"'::regclass AND attname = 'sweep_at' AND NOT attisdropped) THEN
	// 		LOCK TABLE "idem_records" IN ACCESS EXCLUSIVE MODE;
	// 		EXECUTE format('ALTER TABLE "idem_records" ADD COLUMN sweep_at timestamptz NOT NULL DEFAULT %L',
	// 			coalesce((SELECT max(expires_at) FROM "idem_records"), '-infinity'));
	// 		ALTER TABLE "idem_records" ALTER COLUMN sweep_at SET DEFAULT '-infinity';
	// 	END IF;
	// 	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '"idem_records"'::regclass AND attname = 'info' AND NOT attisdropped) THEN
	// 		ALTER TABLE "idem_records" ADD COLUMN info bytea, ADD COLUMN replays bigint NOT NULL DEFAULT 0, ADD COLUMN last_replay timestamptz;
	// 	END IF;
	// 	IF NOT EXISTS (SELECT 1 FROM pg_class, unnest(reloptions) AS o WHERE oid = '"idem_records"'::regclass AND o LIKE 'fillfactor=%') THEN
	// 		ALTER TABLE "idem_records" SET (fillfactor = 80);
	// 	END IF;
	// END $$;
	// DO $$ BEGIN
	// 	IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = '"idem_records"'::regclass AND c.relname = 'idem_records_sweep_at') THEN
	// 		CREATE INDEX "idem_records_sweep_at" ON "idem_records" (sweep_at);
	// 	END IF;
	// END $$;
	// DO $$ DECLARE ix text; BEGIN
	// 	FOR ix IN SELECT format('%I.%I', n.nspname, c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	// 		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE i.indrelid = '"idem_records"'::regclass AND c.relname IN ('idem_records_expires_at', 'idem_records_held') LOOP
	// 		EXECUTE 'DROP INDEX ' || ix;
	// 	END LOOP;
	// END $$;
}
