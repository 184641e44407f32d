package proxy

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// migrateMain runs `idemproxy migrate`: it prints the PostgreSQL store's DDL, or
// applies it to the database of --store. Exit 0: printed or applied; 1: the
// database failed; 2: usage.
func migrateMain(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	table := fs.String("postgres-table", or(getenv("IDEMPROXY_POSTGRES_TABLE"), pgstore.DefaultTable), "")
	store := fs.String("store", getenv("IDEMPROXY_STORE"), "")
	apply := fs.Bool("apply", false, "")
	usage := func() {
		fmt.Fprint(stderr, `usage: idemproxy migrate [--postgres-table NAME] [--apply --store postgres://…]

Prints the DDL of the PostgreSQL store's table and index (CREATE … IF NOT
EXISTS), for teams that manage their schema themselves and run idemproxy with
--postgres-create-schema=false. With --apply, runs it against --store.

  --postgres-table NAME   the table, schema.name allowed (default $IDEMPROXY_POSTGRES_TABLE, else idemproxy_records)
  --apply                 apply the DDL instead of printing it
  --store URL             the database, for --apply (default $IDEMPROXY_STORE)
`)
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		usage()
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	ddl, err := pgstore.Schema(*table)
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy migrate: --postgres-table:", err)
		return 2
	}
	if !*apply {
		fmt.Fprint(stdout, ddl)
		return 0
	}
	if kind, _ := stores.KindOf(*store); kind != "postgres" {
		fmt.Fprintf(stderr, "idemproxy migrate: --apply needs --store postgres://… (got %q)\n", stores.Redact(*store))
		return 2
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, *store)
	if err != nil {
		fmt.Fprintf(stderr, "idemproxy migrate: %s: %s\n", stores.Redact(*store), strings.Join(strings.Fields(err.Error()), " "))
		return 1
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, ddl); err != nil {
		fmt.Fprintln(stderr, "idemproxy migrate:", err)
		return 1
	}
	fmt.Fprintf(stdout, "idemproxy migrate: table %s ready\n", *table)
	return 0
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
