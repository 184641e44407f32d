package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemproxy/idemproxy/cache/pgstore/pgtest"
	"github.com/idemproxy/idemproxy/internal/testutil"
)

// A first execution that finishes while PostgreSQL is down, whose claim lapses
// during the outage: retries sent as soon as PostgreSQL is back must not run
// it again. They used to claim the lapsed key: in the window before the
// pending completion landed (1–221 ms after the restart, in the soak), and for
// good once complete_retry had ended. Now the lapsed claim is held: retries get
// the outcome-unknown answer (or 409) until the completion lands and replaces
// it, and keep getting it when none will.
func TestE2EPostgresRestartHoldsALapsedKey(t *testing.T) {
	skipShort(t)
	t.Run("the completion lands", func(t *testing.T) { postgresRestart(t, "5m") })
	t.Run("complete_retry ends first", func(t *testing.T) { postgresRestart(t, "1s") })
}

func postgresRestart(t *testing.T, completeRetry string) {
	db := pgtest.Start(t)
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", db.URL(), "--lock-ttl", "1s", "--store-timeout", "500ms", "--complete-retry", completeRetry)
	first := make(chan testutil.Response, 1)
	go func() { first <- p.Post(t, "/block", "pg-restart", "x") }()
	<-up.Started
	db.Stop()
	up.Release <- struct{}{} // the upstream answers while the database is down
	if r := <-first; r.Status != 201 {
		t.Fatalf("first: %+v", r)
	}
	defer up.PassBlocked()()            // a retry that runs again answers at once
	time.Sleep(2500 * time.Millisecond) // the 1s claim lapses: no renewal reaches the database
	db.Restart()
	landed := completeRetry != "1s"
	deadline := time.Now().Add(20 * time.Second)
	held := 0
	for {
		r, err := testutil.Do(context.Background(), p.Addr, testutil.KeyedPost("/block", "pg-restart", "x"))
		if err == nil {
			if landed && r.Status == 201 && r.Replayed {
				break // the pending completion landed
			}
			if r.Status == 504 && strings.Contains(r.Body, "outcome-unknown") {
				held++
			} else if r.Status != 409 && r.Status != 503 {
				t.Fatalf("a retry after the restart: %+v, executions %d; want 409, 503 or the held answer (until the completion lands)", r, up.Count("pg-restart"))
			}
		}
		if !landed && held >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %d held answers; the pending completion landed: %v", held, landed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := up.Count("pg-restart"); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}
