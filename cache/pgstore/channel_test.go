package pgstore_test

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/jackc/pgx/v5"
)

// Two instances name one table differently (bare, and schema-qualified): a
// delete through one reaches the other's local cache.
func TestLocalCacheTableSpellings(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	a := mustNew(t, pool, pgstore.Options{Table: "spelled"})
	b := mustNew(t, pool, pgstore.Options{Table: "public.spelled"})
	complete(t, a, "k")
	answeredFromCache(t, a, "k")
	if err := b.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if rec, loaded, err := a.ClaimOrGet(ctx, "k", cache.Claim{Token: "after", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("after a delete through public.spelled, spelled answered loaded=%v %+v %v", loaded, rec, err)
	}
}

// A table name near PostgreSQL's 63-byte limit: Delete and Resolve work, and
// the local cache is trusted.
func TestLongTableName(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	table := "t" + strings.Repeat("x", 59)
	s := mustNew(t, pool, pgstore.Options{Table: table})
	complete(t, s, "k")
	answeredFromCache(t, s, "k")
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, loaded, err := s.ClaimOrGet(ctx, "held", cache.Claim{Token: "h", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("claim: %v %v", loaded, err)
	}
	if err := s.Complete(ctx, "held", "h", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 502, Unknown: true}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Resolve(ctx, "held", &cache.Response{Status: 201}, time.Hour); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	// A schema-qualified name of two long parts too.
	if _, err := pool.Exec(ctx, "CREATE SCHEMA s"+strings.Repeat("y", 59)); err != nil {
		t.Fatal(err)
	}
	q := mustNew(t, pool, pgstore.Options{Table: "s" + strings.Repeat("y", 59) + "." + table})
	complete(t, q, "k2")
	answeredFromCache(t, q, "k2")
	if err := q.Delete(ctx, "k2"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// During a rolling upgrade, instances of the version that named the channel
// after the table as configured still hear this version's changes, and this
// version hears theirs.
func TestLegacyChannels(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool()
	ctx := context.Background()
	s := mustNew(t, pool, pgstore.Options{Table: "public.upgraded"})
	old, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	for _, ch := range []string{"idemproxy_upgraded", "idemproxy_public_upgraded"} {
		if _, err := old.Exec(ctx, "LISTEN "+ch); err != nil {
			t.Fatal(err)
		}
	}
	complete(t, s, "k")
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	heard := map[string]string{}
	for len(heard) < 2 {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := old.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("an earlier version's instance heard %v of the delete: %v", heard, err)
		}
		if !strings.HasPrefix(n.Payload, "\x01") {
			heard[n.Channel] = n.Payload
		}
	}
	if want := hex.EncodeToString([]byte("k")); heard["idemproxy_upgraded"] != want || heard["idemproxy_public_upgraded"] != want {
		t.Fatalf("announcements on the earlier channels: %v, want the key %s on both", heard, want)
	}
	// An earlier version's delete, announced on its channel, reaches this
	// version's cache.
	complete(t, s, "k2")
	answeredFromCache(t, s, "k2")
	if _, err := pool.Exec(ctx, "DELETE FROM upgraded WHERE key = $1", []byte("k2")); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(ctx, "SELECT pg_notify('idemproxy_upgraded', $1)", hex.EncodeToString([]byte("k2"))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // the earlier version's settle window
	if rec, loaded, err := s.ClaimOrGet(ctx, "k2", cache.Claim{Token: "after", Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
		t.Fatalf("after an earlier version deleted k2, this one answered loaded=%v %+v %v", loaded, rec, err)
	}
}

// The channel is the table's as the catalog names it: a mixed-case name (which
// the store quotes) and its schema-qualified spelling share one, and another
// table has another.
func TestChannelOfQuotedNames(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	a := mustNew(t, pool, pgstore.Options{Table: "Mixed"})
	b := mustNew(t, pool, pgstore.Options{Table: "public.Mixed"})
	c := mustNew(t, pool, pgstore.Options{Table: "mixed"})
	if pgstore.Channel(a) != pgstore.Channel(b) || pgstore.Channel(a) == pgstore.Channel(c) {
		t.Fatalf("channels: Mixed %s, public.Mixed %s, mixed %s", pgstore.Channel(a), pgstore.Channel(b), pgstore.Channel(c))
	}
	if n := len(pgstore.Channel(a)); n > 63 {
		t.Fatalf("channel of %d bytes", n)
	}
}
