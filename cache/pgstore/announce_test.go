package pgstore_test

import (
	"context"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/pgstore"
	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/jackc/pgx/v5"
)

// Complete and release announce a change (pg_notify) only for a claim a
// duplicate waits for: notifying takes a database-wide lock from commit to
// flush, and reaches every listening instance. Notifications arrive in commit
// order, so the first one heard after an unwaited complete and release must be
// the waited complete's, and the next the waited release's.
func TestAnnouncesOnlyWaitedLocks(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool()
	ctx := context.Background()
	s := mustNew(t, pool, pgstore.Options{Table: "announced"})

	listen, err := pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(ctx)
	if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{pgstore.Channel(s)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	claim := func(key string) {
		t.Helper()
		if _, loaded, err := s.ClaimOrGet(ctx, key, cache.Claim{Token: "tok-" + key, Fingerprint: "f", Duration: time.Minute}); err != nil || loaded {
			t.Fatalf("claim %s: loaded=%v err=%v", key, loaded, err)
		}
	}
	complete := func(key string) {
		t.Helper()
		if err := s.Complete(ctx, key, "tok-"+key, &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	release := func(key string) {
		t.Helper()
		if err := s.Release(ctx, key, "tok-"+key); err != nil {
			t.Fatal(err)
		}
	}
	next := func(want string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := listen.WaitForNotification(wctx)
		for err == nil && strings.HasPrefix(n.Payload, "\x01idemproxy-ping ") { // the local cache's own
			n, err = listen.WaitForNotification(wctx)
		}
		if err != nil {
			t.Fatalf("waiting for the announcement of %s: %v", want, err)
		}
		if got, _ := hex.DecodeString(n.Payload); string(got) != want {
			t.Fatalf("announced %q, want %q (only waited locks are announced)", got, want)
		}
	}

	for _, k := range []string{"unwaited-done", "unwaited-released", "waited-done", "waited-released"} {
		claim(k)
	}
	_, cancelDone := s.Subscribe("waited-done")
	defer cancelDone()
	_, cancelReleased := s.Subscribe("waited-released")
	defer cancelReleased()
	complete("unwaited-done")
	release("unwaited-released")
	complete("waited-done")
	next("waited-done")
	release("waited-released")
	next("waited-released")

	// Delete and resolve always announce: every instance's local cache must
	// hear of them.
	claim("deleted")
	complete("deleted")
	if err := s.Delete(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	next("deleted")
}

// A table created by the version before the waited column gets it at start-up
// (create_schema on), and is refused with a line naming `idemproxy migrate`
// when the schema is the operator's; the printed DDL brings it up to date.
func TestTableOfAnEarlierVersion(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	const before = `CREATE TABLE %s (
	key         bytea       PRIMARY KEY,
	state       smallint    NOT NULL,
	token       bytea       NOT NULL,
	fingerprint bytea       NOT NULL,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,
	unknown     boolean     NOT NULL DEFAULT false,
	response    bytea
)`
	for _, table := range []string{"old_auto", "old_manual"} {
		if _, err := pool.Exec(ctx, strings.Replace(before, "%s", table, 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO `+table+` VALUES ('k', 1, 'tok', 'f', now(), now() + interval '1 hour', false, NULL)`); err != nil {
			t.Fatal(err)
		}
	}
	s := mustNew(t, pool, pgstore.Options{Table: "old_auto"})
	if _, cancel := s.Subscribe("k"); cancel != nil {
		defer cancel()
	}
	if err := s.Complete(ctx, "k", "tok", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatalf("completing a lock taken before the upgrade: %v", err)
	}

	_, err := pgstore.New(ctx, pool, pgstore.Options{Table: "old_manual", SkipCreateSchema: true})
	if err == nil || !strings.Contains(err.Error(), "idemproxy migrate") {
		t.Fatalf("an earlier version's table with schema creation off: %v, want an error naming idemproxy migrate", err)
	}
	ddl, err := pgstore.Schema("old_manual")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the printed DDL may be applied again
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatalf("applying the printed DDL (time %d): %v", i+1, err)
		}
	}
	m := mustNew(t, pool, pgstore.Options{Table: "old_manual", SkipCreateSchema: true})
	if err := m.Complete(ctx, "k", "tok", &cache.Record{Fingerprint: "f", Response: &cache.Response{Status: 201}}, time.Hour); err != nil {
		t.Fatal(err)
	}
}

// A duplicate waiting on one instance is woken by the first request's
// completion on another: polling once an hour, only the announcement, which
// the waiter's mark asks for, delivers the replay in time.
func TestWaiterOnAnotherInstanceIsWoken(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	a := mustNew(t, pool, pgstore.Options{Table: "waited_across"})
	b := mustNew(t, pool, pgstore.Options{Table: "waited_across"})
	gate, started := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(started)
			<-gate
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte("paid"))
	})
	wrap := func(s *pgstore.Store) http.Handler {
		h, err := middleware.New(s, func(s *middleware.Settings) { s.Wait = 30 * time.Second; s.WaitPoll = time.Hour })
		if err != nil {
			t.Fatal(err)
		}
		return h.Wrap(up)
	}
	ha, hb := wrap(a), wrap(b)
	send := func(h http.Handler) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/charge", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "across")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- send(ha) }()
	<-started
	second := make(chan *httptest.ResponseRecorder, 1)
	go func() { second <- send(hb) }()
	time.Sleep(300 * time.Millisecond) // the duplicate is waiting by now
	close(gate)
	if w := <-first; w.Code != 201 {
		t.Fatalf("first: %d", w.Code)
	}
	select {
	case w := <-second:
		if w.Code != 201 || w.Body.String() != "paid" || calls.Load() != 1 {
			t.Fatalf("waiter: %d %q after %d calls, want the replay of the one call", w.Code, w.Body.String(), calls.Load())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter on the other instance was not woken by the completion")
	}
}

// Adding the waited column takes the table's exclusive lock, which waits for
// every transaction that holds the table (a pg_dump, a long report), while
// every statement of every running instance queues behind it. Start-up must
// give up soon, and say why, rather than stop the other instances' traffic
// for as long as that transaction lasts.
func TestAddingTheColumnDoesNotStallTraffic(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE stall (
	key bytea PRIMARY KEY, state smallint NOT NULL, token bytea NOT NULL, fingerprint bytea NOT NULL,
	created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, unknown boolean NOT NULL DEFAULT false, response bytea)`); err != nil {
		t.Fatal(err)
	}
	dump, err := pool.Begin(ctx) // a long reader: pg_dump holds ACCESS SHARE for its whole run
	if err != nil {
		t.Fatal(err)
	}
	defer dump.Rollback(ctx)
	if _, err := dump.Exec(ctx, `SELECT count(*) FROM stall`); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		s, err := pgstore.New(ctx, pool, pgstore.Options{Table: "stall"})
		if err == nil {
			s.Close()
		}
		started <- err
	}()
	time.Sleep(200 * time.Millisecond) // the ALTER waits for the claim by now
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t0 := time.Now()
	if _, err := pool.Exec(rctx, `SELECT 1 FROM stall WHERE key = 'k'`); err != nil {
		t.Fatalf("another instance's read: %v after %v", err, time.Since(t0))
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("another instance's read waited %v behind the migration", d)
	}
	select {
	case err := <-started:
		if err == nil || !strings.Contains(err.Error(), "waited") {
			t.Fatalf("start-up with the table held: %v, want an error about the waited column", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("start-up waits for the lock for as long as the transaction lasts")
	}
}

// The printed DDL adds the column only when it is missing: applied to an up to
// date table (`idemproxy migrate --apply` on every deploy), it takes no
// exclusive lock, so a transaction holding the table does not block it.
func TestPrintedDDLTakesNoExclusiveLockWhenUpToDate(t *testing.T) {
	pool := pgtest.Start(t).Pool()
	ctx := context.Background()
	mustNew(t, pool, pgstore.Options{Table: "up_to_date"})
	ddl, err := pgstore.Schema("up_to_date")
	if err != nil {
		t.Fatal(err)
	}
	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	if _, err := reader.Exec(ctx, `SELECT count(*) FROM up_to_date`); err != nil { // holds ACCESS SHARE until it ends
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 1000`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		t.Fatalf("applying the DDL to an up-to-date table while another transaction reads it: %v", err)
	}
}
