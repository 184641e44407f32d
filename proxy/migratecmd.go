package proxy

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/internal/stores"
)

// migrateMain runs `idemproxy migrate`: it prints the PostgreSQL store's DDL, or
// applies it to the database of --store; with --store dynamodb://TABLE, the
// DynamoDB table's definition (the AWS CLI commands that create it), or, with
// --apply, creates the table. Exit 0: printed or applied; 1: the database
// failed; 2: usage.
func migrateMain(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	table := fs.String("postgres-table", or(getenv("IDEMPROXY_POSTGRES_TABLE"), pgstore.DefaultTable), "")
	store := fs.String("store", getenv("IDEMPROXY_STORE"), "")
	apply := fs.Bool("apply", false, "")
	usage := func() {
		fmt.Fprint(stderr, `usage: idemproxy migrate [--postgres-table NAME] [--apply --store postgres://…]
       idemproxy migrate --store dynamodb://TABLE [--apply]

Prints the DDL of the PostgreSQL store's table and index (CREATE … IF NOT
EXISTS, and the columns later versions added, each added only when missing),
for teams that manage their schema themselves and run idemproxy with
--postgres-create-schema=false. With --apply, runs it against --store; running
it again changes nothing and takes no exclusive lock.

With --store dynamodb://TABLE, prints the DynamoDB table's definition instead,
as the AWS CLI commands that create it (for teams that run idemproxy with
--dynamodb-create-table=false); with --apply, creates the table when it is
missing (on-demand, time to live on), waits until it is active and checks its
key schema. Region, credentials and endpoint come from the AWS environment
(AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB, instance roles).

  --postgres-table NAME   the table, schema.name allowed (default $IDEMPROXY_POSTGRES_TABLE, else idemproxy_records)
  --apply                 apply the DDL (create the DynamoDB table) instead of printing it
  --store URL             the database, for --apply; a dynamodb:// URL selects DynamoDB (default $IDEMPROXY_STORE)
`)
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		usage()
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if kind, _ := stores.KindOf(*store); kind == "dynamodb" {
		tableSet := false
		fs.Visit(func(f *flag.Flag) { tableSet = tableSet || f.Name == "postgres-table" })
		if tableSet {
			fmt.Fprintln(stderr, "idemproxy migrate: --postgres-table applies to a PostgreSQL store; --store is a DynamoDB table (dynamodb://TABLE)")
			return 2
		}
		return migrateDynamoDB(*store, *apply, stdout, stderr)
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
		fmt.Fprintf(stderr, "idemproxy migrate: --apply needs --store postgres://… or dynamodb://TABLE (got %q)\n", stores.Redact(*store))
		return 2
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, *store)
	if err != nil {
		fmt.Fprintf(stderr, "idemproxy migrate: %s: %s\n", stores.Redact(*store), Redact(strings.Join(strings.Fields(err.Error()), " ")))
		return 1
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, ddl); err != nil {
		fmt.Fprintln(stderr, "idemproxy migrate:", Redact(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "idemproxy migrate: table %s ready\n", *table)
	return 0
}

// migrateDynamoDB prints the table's definition, or creates the table.
func migrateDynamoDB(store string, apply bool, stdout, stderr io.Writer) int {
	table, err := stores.DynamoDBTable(store)
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy migrate: --store:", err)
		return 2
	}
	if !apply {
		schema, _ := dynamostore.Schema(table) // the table was checked
		fmt.Fprint(stdout, schema)
		return 0
	}
	d := stores.DefaultDynamoDB()
	d.CreateTable = true
	warn := func(msg string, args ...any) {
		for i := 0; i+1 < len(args); i += 2 {
			msg += fmt.Sprintf(" %v=%v", args[i], args[i+1])
		}
		fmt.Fprintln(stderr, "idemproxy migrate: warning:", msg)
	}
	s, closeFn, err := d.Open(context.Background(), store, stores.Env{Warn: warn})
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy migrate:", Redact(strings.Join(strings.Fields(err.Error()), " ")))
		return 1
	}
	_ = closeFn()
	fmt.Fprintf(stdout, "idemproxy migrate: table %s ready\n", s.Table())
	return 0
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
