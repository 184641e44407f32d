package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
)

// postgres_synchronous_commit reaches every connection of the store's pool,
// over the URL's: a trigger on the table refuses any write made with another
// setting, so a claim succeeds only when the setting applied.
func TestPostgresSynchronousCommit(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	admin := srv.Pool()
	ddl, err := pgstore.Schema("sc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, ddl+`
CREATE FUNCTION sc_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF current_setting('synchronous_commit') <> 'off' THEN
		RAISE EXCEPTION 'synchronous_commit is %', current_setting('synchronous_commit');
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER sc_guard BEFORE INSERT OR UPDATE ON sc FOR EACH ROW EXECUTE FUNCTION sc_guard();`); err != nil {
		t.Fatal(err)
	}
	claim := func(p pgstore.Settings, url, key string) error {
		t.Helper()
		s, closeFn, err := p.Open(ctx, url, cache.Env{})
		if err != nil {
			t.Fatal(err)
		}
		defer closeFn()
		_, _, err = s.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute})
		return err
	}
	p := pgstore.DefaultSettings()
	p.Table = "sc"
	if err := claim(p, srv.URL(), "default"); err == nil || !strings.Contains(err.Error(), "synchronous_commit is on") {
		t.Fatalf("with the server's setting: %v, want the guard's refusal", err)
	}
	p.SynchronousCommit = "off"
	if err := claim(p, srv.URL(), "off"); err != nil {
		t.Fatalf("with synchronous_commit off: %v", err)
	}
	sep := "?"
	if strings.Contains(srv.URL(), "?") {
		sep = "&"
	}
	if err := claim(p, srv.URL()+sep+"synchronous_commit=on", "over-the-url"); err != nil {
		t.Fatalf("the setting over the URL's: %v", err)
	}
	p.SynchronousCommit = "later"
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "synchronous_commit") {
		t.Fatalf("a bad value: %v", err)
	}
}

// An unlogged table (an operator's choice, see docs/stores.md) works as a
// logged one, and starting the store does not change it back.
func TestPostgresUnloggedTable(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	admin := srv.Pool()
	ddl, err := pgstore.Schema("ul")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, ddl+`ALTER TABLE ul SET UNLOGGED;`); err != nil {
		t.Fatal(err)
	}
	p := pgstore.DefaultSettings()
	p.Table = "ul"
	s, closeFn, err := p.Open(ctx, srv.URL(), cache.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if _, loaded, err := s.ClaimOrGet(ctx, "k", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("claim: %v %v", loaded, err)
	}
	if err := s.Complete(ctx, "k", "t", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if rec, loaded, err := s.ClaimOrGet(ctx, "k", cache.Claim{Token: "u", Fingerprint: "f", Duration: time.Minute}); err != nil || !loaded || rec.Response.Status != 201 {
		t.Fatalf("replay: %+v %v %v", rec, loaded, err)
	}
	var persistence string
	if err := admin.QueryRow(ctx, `SELECT relpersistence FROM pg_class WHERE oid = 'ul'::regclass`).Scan(&persistence); err != nil || persistence != "u" {
		t.Fatalf("relpersistence %q %v, want u (unlogged)", persistence, err)
	}
}

// The PostgreSQL store's errors never show the password of its URL, however
// the URL gives it: user:password@, password= or sslpassword= in the query,
// or the keyword/value form. Opening fails fast (nothing listens on port 1,
// or the URL is refused), and the error names the URL redacted.
func TestPostgresErrorsHideThePassword(t *testing.T) {
	ctx := context.Background()
	for _, rawURL := range []string{
		"postgres://idem:hunter2@127.0.0.1:1/idem?connect_timeout=2",
		"postgres://idem@127.0.0.1:1/idem?password=hunter2&connect_timeout=2",
		"postgres://idem@127.0.0.1:1/idem?sslpassword=hunter2&sslmode=bogus",
		"postgres://idem@127.0.0.1:notaport/idem?password=hunter2",
		"host=127.0.0.1 port=1 user=idem password=hunter2 dbname=idem connect_timeout=2",
		"host=127.0.0.1 port=notaport password=hunter2",
	} {
		s := pgstore.Driver.Settings()
		_, _, err := s.Open(ctx, rawURL, cache.Env{})
		if err == nil {
			t.Errorf("%s: opened; want an error", cache.RedactURL(rawURL))
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("opening %s: %v: shows the password", cache.RedactURL(rawURL), err)
		}
	}
}
