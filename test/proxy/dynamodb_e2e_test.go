package proxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
	"github.com/idemproxy/idemproxy/internal/testutil"
	"github.com/idemproxy/idemproxy/tracing/otlptest"
)

// The built proxy on DynamoDB (DynamoDB Local, reached through the standard AWS
// environment the binary inherits: AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION, …),
// each subtest on a table of its own. Under CI=true a DynamoDB Local that
// cannot start fails the test (dynamotest), never skips it.
func TestE2EDynamoDB(t *testing.T) {
	skipShort(t)
	srv := dynamotest.StartOwn(t)
	srv.Env(t)
	t.Run("protocol", dynamoProtocol)
	t.Run("large response", dynamoLarge)
	t.Run("two instances", dynamoTwoInstances)
	t.Run("sigkill", dynamoSigkill)
	t.Run("table management", dynamoTableManagement)
	t.Run("unreachable", dynamoUnreachable)
	t.Run("tracing", dynamoTracing)
	t.Run("down", func(t *testing.T) { dynamoDown(t, srv) }) // last: it stops the server
}

// The example config (examples/dynamodb.yaml: its store, dynamodb://idemproxy,
// and its table created at start-up):
// run once, replay, 422, 409, the readiness check, and a record gone after
// --ttl whatever DynamoDB's own deletion (which can lag for days) has done.
func dynamoProtocol(t *testing.T) {
	up := testutil.NewUpstream(t)
	p := start(t, "--config", "../../examples/dynamodb.yaml", "--upstream", up.URL, "--ttl", "2s", "--wait", "0s")
	resp, err := http.Get("http://" + p.Admin + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz: %v %v", resp, err)
	}
	resp.Body.Close()

	first := p.Post(t, "/pay", "k1", "a")
	again := p.Post(t, "/pay", "k1", "a")
	if first.Status != 201 || first.Replayed || !again.Replayed || again.Body != first.Body || up.Count("k1") != 1 {
		t.Fatalf("replay: first %+v again %+v, executions %d", first, again, up.Count("k1"))
	}
	if r := p.Post(t, "/pay", "k1", "b"); r.Status != 422 || !strings.Contains(r.Body, "mismatch") {
		t.Fatalf("mismatch: %+v", r)
	}
	done := make(chan testutil.Response)
	go func() { done <- p.Post(t, "/block", "k409", "") }()
	<-up.Started
	if r := p.Post(t, "/block", "k409", ""); r.Status != 409 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("in flight: %+v", r)
	}
	up.Release <- struct{}{}
	if r := <-done; r.Status != 201 {
		t.Fatalf("blocked first: %+v", r)
	}
	testutil.Eventually(t, 10*time.Second, "the record to expire after its 2s TTL", func() bool {
		return !p.Post(t, "/pay", "k1", "a").Replayed
	})
	if up.Count("k1") != 2 {
		t.Fatalf("k1 executions = %d, want 2 (once, then once after expiry)", up.Count("k1"))
	}
	if logs := p.Logs.String(); strings.Contains(logs, "SDK ") || strings.Contains(logs, `"level":"ERROR"`) {
		t.Fatalf("the log has lines of the AWS SDK's own, or errors:\n%s", logs)
	}
}

// A 4 MiB response (over chunk items) is replayed byte for byte, by another
// instance too, and the upstream ran once. The store comes from IDEMPROXY_STORE.
func dynamoLarge(t *testing.T) {
	up := testutil.NewUpstream(t)
	t.Setenv("IDEMPROXY_STORE", "dynamodb://e2e_large")
	args := []string{"--upstream", up.URL, "--max-request-body", "5MiB"}
	a, b := start(t, args...), start(t, args...)
	body := make([]byte, 4<<20)
	rand.Read(body)
	first := a.Post(t, "/pay", "big", string(body))
	if first.Status != 201 || len(first.Body) < 4<<20 || !strings.HasSuffix(first.Body, string(body)) {
		t.Fatalf("first: %d, %d bytes", first.Status, len(first.Body))
	}
	for _, p := range []*testutil.Proc{a, b} {
		r := p.Post(t, "/pay", "big", string(body))
		if r.Status != 201 || !r.Replayed || r.Body != first.Body || r.Header.Get("X-Execution") != "1" {
			t.Fatalf("replay on %s: %d, %d bytes, identical %v, replayed %v", p.Addr, r.Status, len(r.Body), r.Body == first.Body, r.Replayed)
		}
	}
	if n := up.Count("big"); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
}

// Two instances on one table: 50 concurrent requests with one key, split
// across both, run once; every other answer is 409 (in flight) or the replay.
func dynamoTwoInstances(t *testing.T) {
	up := testutil.NewUpstream(t)
	a := start(t, "--upstream", up.URL, "--store", "dynamodb://e2e_shared")
	b := start(t, "--upstream", up.URL, "--store", "dynamodb://e2e_shared")
	const n = 50
	var wg sync.WaitGroup
	results := make(chan testutil.Response, n)
	errs := make(chan error, n)
	for i := range n {
		addr := a.Addr
		if i%2 == 1 {
			addr = b.Addr
		}
		wg.Go(func() {
			r, err := testutil.Do(context.Background(), addr, testutil.KeyedPost("/slow?ms=500", "dup", "x"))
			if err != nil {
				errs <- err
				return
			}
			results <- r
		})
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatalf("a request failed: %v", err)
	}
	got := map[int]int{}
	executed := 0
	for r := range results {
		got[r.Status]++
		if r.Status == 201 && !r.Replayed {
			executed++
		}
	}
	if up.Count("dup") != 1 || executed != 1 || got[201]+got[409] != n {
		t.Fatalf("executions %d (answered as executed %d), statuses %v; want one execution and only 201/409", up.Count("dup"), executed, got)
	}
	for _, p := range []*testutil.Proc{a, b} {
		if r := p.Post(t, "/slow?ms=500", "dup", "x"); !r.Replayed {
			t.Fatalf("%s did not replay: %+v", p.Addr, r)
		}
	}
}

// SIGKILL mid-flight: the claim outlives the process until its claim lapses; a
// retry on another instance gets 409 until then, and the outcome-unknown answer
// after it: the key is held, and never runs again.
func dynamoSigkill(t *testing.T) {
	up := testutil.NewUpstream(t)
	args := []string{"--upstream", up.URL, "--store", "dynamodb://e2e_kill", "--lock-ttl", "1500ms"}
	p := start(t, args...)
	go func() { _, _ = testutil.Do(context.Background(), p.Addr, testutil.KeyedPost("/block", "kill", "x")) }()
	<-up.Started
	killedAt := time.Now()
	_ = p.Cmd.Process.Kill()
	q := start(t, args...)
	if r := q.Post(t, "/pay", "kill", "x"); r.Status != 422 {
		t.Fatalf("other request, same key: %+v", r)
	}
	defer up.PassBlocked()() // a retry that reaches the upstream is let through at once
	saw409 := false
	var heldAt time.Time
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := q.Post(t, "/block", "kill", "x")
		if r.Status == 409 {
			saw409 = true
		}
		if r.Status == 504 && strings.Contains(r.Body, "outcome-unknown") {
			heldAt = time.Now()
			break
		}
		if r.Status != 409 || time.Now().After(deadline) {
			t.Fatalf("the killed instance's key: %+v, want 409 until its lease lapses, then the held outcome-unknown answer", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !saw409 {
		t.Fatal("no 409 while the killed instance's lease was live")
	}
	if heldAt.Sub(killedAt) < time.Second {
		t.Fatalf("held %v after the kill, before the 1.5s lease could lapse", heldAt.Sub(killedAt))
	}
	if r := q.Post(t, "/block", "kill", "x"); r.Status != 504 || !r.Replayed {
		t.Fatalf("a later retry: %+v, want the held answer", r)
	}
	if up.Count("kill") != 1 {
		t.Fatalf("executions of the killed key = %d, want 1", up.Count("kill"))
	}
}

// With table creation off, a missing table stops start-up with one line naming
// idemproxy migrate; migrate prints the table's definition and, with --apply,
// creates it; then the proxy starts with creation off.
func dynamoTableManagement(t *testing.T) {
	up := testutil.NewUpstream(t)
	flags := []string{"--upstream", up.URL, "--store", "dynamodb://e2e_managed", "--dynamodb-create-table=false"}
	code, out := runBin(t, flags...)
	if s := strings.TrimSpace(out); code != 1 || !strings.Contains(s, "idemproxy migrate") || strings.Contains(s, "\n") {
		t.Fatalf("start without the table: exit %d, %q; want exit 1 and one line naming idemproxy migrate", code, out)
	}
	code, out = runBin(t, "migrate", "--store", "dynamodb://e2e_managed")
	if code != 0 || !strings.Contains(out, "aws dynamodb create-table") || !strings.Contains(out, `"TableName":"e2e_managed"`) || !strings.Contains(out, "update-time-to-live") {
		t.Fatalf("migrate (print): exit %d: %s", code, out)
	}
	for _, bad := range [][]string{
		{"migrate", "--store", "dynamodb://a/b"},
		{"migrate", "--store", "dynamodb://e2e_managed", "--postgres-table", "x"},
	} {
		if code, out := runBin(t, bad...); code != 2 || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Fatalf("%v: exit %d: %s; want 2 and one line", bad, code, out)
		}
	}
	if code, out := runBin(t, "migrate", "--store", "dynamodb://e2e_managed", "--apply"); code != 0 || !strings.Contains(out, "table e2e_managed ready") {
		t.Fatalf("migrate --apply: exit %d: %s", code, out)
	}
	if code, out := runBin(t, "migrate", "--store", "dynamodb://e2e_managed", "--apply"); code != 0 {
		t.Fatalf("migrate --apply again: exit %d: %s", code, out)
	}
	p := start(t, flags...)
	if r := p.Post(t, "/pay", "m1", "a"); r.Status != 201 {
		t.Fatalf("on the migrated table: %+v", r)
	}
	if r := p.Post(t, "/pay", "m1", "a"); !r.Replayed {
		t.Fatalf("replay on the migrated table: %+v", r)
	}
	if strings.Contains(p.Logs.String(), "time to live is off") {
		t.Fatalf("the migrated table has no time to live:\n%s", p.Logs)
	}
}

// A DynamoDB that does not answer stops start-up with one line; so does a
// configuration with no region, and a setting out of range (exit 2).
func dynamoUnreachable(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://"+testutil.FreeAddr(t)) // nothing listens
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--upstream", "http://x", "--store", "dynamodb://idem"}, 1, "DynamoDB unreachable"},
		{[]string{"--upstream", "http://x", "--store", "dynamodb://idem", "--dynamodb-inline-limit", "1MiB"}, 2, "--dynamodb-inline-limit: must be between 1B and 300KiB"},
		{[]string{"--upstream", "http://x", "--store", "dynamodb://idem?region=x"}, 2, "--store"},
		{[]string{"--upstream", "http://x", "--store", "memory", "--dynamodb-max-response", "1MiB"}, 2, "applies to a dynamodb store"},
	}
	for _, c := range cases {
		code, out := runBin(t, c.args...)
		if s := strings.TrimSpace(out); code != c.code || !strings.Contains(s, c.want) || strings.Contains(s, "\n") {
			t.Errorf("%v: exit %d, %q; want exit %d and one line with %q", c.args, code, s, c.code, c.want)
		}
	}
	t.Setenv("AWS_REGION", "")
	if code, out := runBin(t, "--upstream", "http://x", "--store", "dynamodb://idem"); code != 1 || !strings.Contains(out, "AWS_REGION") {
		t.Errorf("no region: exit %d, %q", code, out)
	}
}

// With tracing on, the store's DynamoDB requests are client spans in the
// request's trace.
func dynamoTracing(t *testing.T) {
	rc := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", "dynamodb://e2e_traced")
	if r := p.Post(t, "/pay", "s1", "a"); r.Status != 201 {
		t.Fatalf("%+v", r)
	}
	var names []string
	testutil.Eventually(t, 15*time.Second, "the server span and its DynamoDB spans", func() bool {
		var server *tracepb.Span
		all := rc.Spans()
		for _, s := range all {
			if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				server = s
			}
		}
		names = nil
		for _, s := range all {
			if server != nil && otlptest.Attr(s, "db.system.name").GetStringValue() == "aws.dynamodb" &&
				bytes.Equal(s.TraceId, server.TraceId) && s.Kind == tracepb.Span_SPAN_KIND_CLIENT {
				names = append(names, s.Name)
			}
		}
		return len(names) >= 2 // the claim, and the completion
	})
	if !strings.Contains(strings.Join(names, ","), "DynamoDB.PutItem") {
		t.Fatalf("DynamoDB spans in the request's trace: %v; want the claim's DynamoDB.PutItem", names)
	}
}

// DynamoDB gone: /readyz says so, and a tracked request gets 503
// store-unavailable within store_timeout, forwarded to nobody.
func dynamoDown(t *testing.T, srv *dynamotest.Server) {
	up := testutil.NewUpstream(t)
	p := start(t, "--upstream", up.URL, "--store", "dynamodb://e2e_down", "--store-timeout", "1s")
	if r := p.Post(t, "/pay", "d1", "a"); r.Status != 201 {
		t.Fatalf("before: %+v", r)
	}
	srv.Stop(t)
	resp, err := http.Get("http://" + p.Admin + "/readyz")
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("/readyz with DynamoDB down: %v %v", resp, err)
	}
	resp.Body.Close()
	began := time.Now()
	if r := p.Post(t, "/pay", "d2", "a"); r.Status != 503 || !strings.Contains(r.Body, "store-unavailable") || up.Count("d2") != 0 {
		t.Fatalf("with DynamoDB down: %+v, forwarded %d times", r, up.Count("d2"))
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("the 503 took %v with a 1s store_timeout", d)
	}
}
