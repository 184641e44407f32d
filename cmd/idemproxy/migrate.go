package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/internal/conf"
	"github.com/idemproxy/idemproxy/internal/stores"
	"github.com/idemproxy/idemproxy/proxy"
)

// migrateMain runs `idemproxy migrate`: it prints the schema of the store
// --store selects, or applies it to that store with --apply. The stores with
// a schema are those whose settings are cache.SchemaSettings (PostgreSQL:
// its DDL; DynamoDB: the AWS CLI commands that create its table); without
// --store, or with a store that has none, it prints the first one's. Its
// flags are --store, --apply, and those of the stores' settings tagged
// schema:"" (--postgres-table), each also read from its variable. Exit 0:
// printed or applied; 1: the store failed; 2: usage.
func migrateMain(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	store := fs.String("store", getenv("IDEMPROXY_STORE"), "")
	apply := fs.Bool("apply", false, "")
	cfg := proxy.DefaultConfig()
	kinds, flags := schemaStores(&cfg.Stores)
	values := map[string]*string{}
	for _, f := range flags {
		values[f.Name] = fs.String(f.FlagName(), "", f.Help)
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprint(stderr, migrateUsage(kinds, flags, &cfg))
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	k := kinds[0]
	if sel, err := stores.Select(*store); err == nil && hasSchema(sel) {
		k = sel
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, f := range flags {
		v, set := *values[f.Name], given[f.FlagName()]
		if f.store != k.Name {
			if set {
				fmt.Fprintf(stderr, "idemproxy migrate: --%s applies to a %s store; --store is %s\n", f.FlagName(), f.store, k.Name)
				return 2
			}
			continue
		}
		if !set {
			v = getenv(f.EnvName(proxy.EnvPrefix))
		}
		if v == "" {
			continue
		}
		if err := f.Set(&cfg, v); err != nil {
			fmt.Fprintf(stderr, "idemproxy migrate: --%s: %v\n", f.FlagName(), err)
			return 2
		}
	}
	st := cfg.Stores.Of(k.Name).(cache.SchemaSettings)
	schema, err := st.Schema(*store)
	var fe *cache.FieldError
	switch {
	case errors.As(err, &fe):
		fmt.Fprintf(stderr, "idemproxy migrate: --%s-%s: %v\n", fe.Store, strings.ReplaceAll(fe.Field, "_", "-"), fe.Err)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "idemproxy migrate: --store:", err)
		return 2
	case !*apply:
		fmt.Fprint(stdout, schema)
		return 0
	}
	if sel, err := stores.Select(*store); err != nil || sel.Name != k.Name {
		var want []string
		for _, k := range kinds {
			want = append(want, k.Schemes[0]+"://…")
		}
		fmt.Fprintf(stderr, "idemproxy migrate: --apply needs --store %s (got %q)\n", conf.OrList(want), stores.Redact(*store))
		return 2
	}
	warn := func(msg string, args ...any) {
		for i := 0; i+1 < len(args); i += 2 {
			msg += fmt.Sprintf(" %v=%v", args[i], args[i+1])
		}
		fmt.Fprintln(stderr, "idemproxy migrate: warning:", msg)
	}
	ready, err := st.Migrate(context.Background(), *store, cache.Env{Warn: warn})
	if err != nil {
		fmt.Fprintln(stderr, "idemproxy migrate:", proxy.Redact(strings.Join(strings.Fields(err.Error()), " ")))
		return 1
	}
	fmt.Fprintf(stdout, "idemproxy migrate: %s ready\n", ready)
	return 0
}

// hasSchema reports whether the store k has a schema to migrate.
func hasSchema(k stores.Entry) bool {
	_, ok := k.Settings().(cache.SchemaSettings)
	return ok
}

// schemaFlag is a setting a store's schema reads (tagged schema:""), as a
// setting of the proxy (postgres_table), and its store.
type schemaFlag struct {
	conf.Field
	store string
}

// schemaStores returns the stores with a schema, and the settings their
// schemas read.
func schemaStores(settings *stores.Settings) ([]stores.Entry, []schemaFlag) {
	var kinds []stores.Entry
	for _, k := range stores.Drivers {
		if hasSchema(k) {
			kinds = append(kinds, k)
		}
	}
	var flags []schemaFlag
	for _, f := range proxy.Fields() {
		for _, k := range kinds {
			name, ok := strings.CutPrefix(f.Name, k.Name+"_")
			if ok && stores.SchemaSetting(settings.Of(k.Name), name) {
				flags = append(flags, schemaFlag{f, k.Name})
			}
		}
	}
	return kinds, flags
}

// migrateUsage is migrate's help.
func migrateUsage(kinds []stores.Entry, flags []schemaFlag, def *proxy.Config) string {
	var b strings.Builder
	b.WriteString("usage: idemproxy migrate [--store URL] [--apply]")
	for _, f := range flags {
		fmt.Fprintf(&b, " [--%s VALUE]", f.FlagName())
	}
	fmt.Fprintf(&b, `

Prints the schema of the store --store selects: what that store creates at
start-up when it is missing, as the commands that make it, for teams that
manage it themselves and turn that creation off. Without --store, or with a
store that has no schema, the %s store's. With --apply, applies it to the
store at --store; applying it again changes nothing.

The stores with a schema:
`, kinds[0].Name)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %s: %s\n", k.Name, k.Help)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  --store URL   the store, for --apply (default $%s)\n", proxy.EnvName("store"))
	b.WriteString("  --apply       apply the schema instead of printing it\n")
	for _, f := range flags {
		fmt.Fprintf(&b, "  --%s VALUE   %s (default $%s, else %s)\n", f.FlagName(), f.Help, f.EnvName(proxy.EnvPrefix), f.Text(def))
	}
	return b.String()
}
