package dynamostore_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
	"github.com/idemproxy/idemproxy/middleware"
)

// api answers 201 with a body of ?size= bytes (a pattern), or "ok"; ?block=1
// waits for release. It counts its executions per key.
type api struct {
	mu      sync.Mutex
	calls   map[string]int
	release chan struct{}
	started chan string
}

func newAPI() *api {
	return &api{calls: map[string]int{}, release: make(chan struct{}), started: make(chan string, 100)}
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.calls[key]++
	a.mu.Unlock()
	a.started <- key
	if r.URL.Query().Get("block") != "" {
		<-a.release
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(201)
	if n, _ := strconv.Atoi(r.URL.Query().Get("size")); n > 0 {
		_, _ = w.Write(pattern(n))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// waitStarted waits until an execution of key has started.
func (a *api) waitStarted(key string) {
	for k := range a.started {
		if k == key {
			return
		}
	}
}

func (a *api) count(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[key]
}

func send(h http.Handler, key, query, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/charges?"+query, strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func wrap(t testing.TB, s *dynamostore.Store, next http.Handler, opts ...middleware.Option) http.Handler {
	t.Helper()
	h, err := middleware.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h.Wrap(next)
}

// meter sums the capacity a store reports, per phase.
type meter struct {
	mu                  sync.Mutex
	reported, estimated float64
	calls               map[string]int
}

func (m *meter) add(c dynamostore.Consumed) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.Estimated {
		m.estimated += c.Units
	} else {
		m.reported += c.Units
	}
}

func (m *meter) take() (reported, estimated float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, e := m.reported, m.estimated
	m.reported, m.estimated = 0, 0
	return r, e
}

// Requests and capacity units per request, through the middleware: a first
// execution is a claim and a complete; a replay, a 409 and a 422 are one
// failed claim that brings the record back; a large response adds its chunk
// writes and one batched read. Capacity that DynamoDB reports
// (ReturnConsumedCapacity) and, for failed conditional writes, which it does
// not, the figure by its rule. Run with -v for the table (BENCHMARKS.md).
func TestRoundTripsAndCapacity(t *testing.T) {
	var m meter
	e := newEnv(t, dynamostore.Options{Now: time.Now, Capacity: m.add})
	up := newAPI()
	h := wrap(t, e.store, up)
	const large = 4 << 20
	largeChunks := (large + 200) / dynamostore.ChunkSize
	cases := []struct {
		name, key, query, body string
		status                 int
		requests               map[string]int
	}{
		{"first execution", "k", "", "x", 201, map[string]int{"PutItem": 1, "UpdateItem": 1}},
		{"replay", "k", "", "x", 201, map[string]int{"PutItem": 1}},
		{"422 (key reused, other body)", "k", "", "y", 422, map[string]int{"PutItem": 1}},
		{"first execution, 4 MiB response", "big", "size=" + strconv.Itoa(large), "x", 201,
			map[string]int{"PutItem": 1, "BatchWriteItem": (largeChunks + 1 + 4) / 5, "UpdateItem": 1}}, // 5 chunks (2 MiB) a request
		{"replay, 4 MiB response", "big", "size=" + strconv.Itoa(large), "x", 201, map[string]int{"PutItem": 1, "BatchGetItem": 1}},
	}
	var report strings.Builder
	fmt.Fprintf(&report, "\n| request | DynamoDB requests | capacity units reported | estimated (failed conditional write) |\n|---|---|---|---|\n")
	row := func(name string, calls map[string]int, rep, est float64) {
		var parts []string
		for c, n := range calls {
			parts = append(parts, fmt.Sprintf("%d %s", n, c))
		}
		sort.Strings(parts)
		fmt.Fprintf(&report, "| %s | %s | %.1f | %.1f |\n", name, strings.Join(parts, " + "), rep, est)
	}
	for _, c := range cases {
		e.faults.Reset()
		m.take()
		w := send(h, c.key, c.query, c.body)
		if w.Code != c.status {
			t.Fatalf("%s: %d, want %d", c.name, w.Code, c.status)
		}
		got := e.faults.Calls()
		if fmt.Sprint(got) != fmt.Sprint(c.requests) {
			t.Errorf("%s: requests %v, want %v", c.name, got, c.requests)
		}
		rep, est := m.take()
		row(c.name, got, rep, est)
	}
	// A 409: the duplicate of a request still running.
	slow := make(chan struct{})
	go func() { defer close(slow); send(h, "slow", "block=1", "x") }()
	up.waitStarted("slow")
	e.faults.Reset()
	m.take()
	if w := send(h, "slow", "block=1", "x"); w.Code != 409 {
		t.Fatalf("409: %d", w.Code)
	}
	got := e.faults.Calls()
	if fmt.Sprint(got) != fmt.Sprint(map[string]int{"PutItem": 1}) {
		t.Errorf("409: requests %v, want one PutItem", got)
	}
	rep, est := m.take()
	row("409 (in flight)", got, rep, est)
	close(up.release)
	<-slow
	t.Log(report.String())
}

// A response at the core's default max_body (10 MiB) replays byte-identical,
// from chunk items; every item the store wrote carries the ttl attribute.
func TestLargeResponseReplays(t *testing.T) {
	e := newEnv(t, dynamostore.Options{Now: time.Now})
	up := newAPI()
	// Writing 10 MiB of chunks to DynamoDB Local under the race detector on a
	// loaded machine can take longer than the default store_timeout (seen: 5s
	// passed, the completion went on in the background and the replay got 409);
	// this test is about the bytes, not the time.
	h := wrap(t, e.store, up, func(s *middleware.Settings) { s.StoreTimeout = time.Minute })
	size := int(middleware.DefaultSettings().MaxBody)
	first := send(h, "big", "size="+strconv.Itoa(size), "x")
	if first.Code != 201 || first.Body.Len() != size {
		t.Fatalf("first: %d, %d bytes", first.Code, first.Body.Len())
	}
	again := send(h, "big", "size="+strconv.Itoa(size), "x")
	if again.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body.Bytes(), pattern(size)) || again.Code != 201 {
		t.Fatalf("replay: %d replayed=%q, %d bytes, identical %v", again.Code, again.Header().Get("Idempotent-Replayed"),
			again.Body.Len(), bytes.Equal(again.Body.Bytes(), pattern(size)))
	}
	if n := up.count("big"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
	items := scan(t, e)
	if len(items) < 2+size/dynamostore.ChunkSize {
		t.Fatalf("%d items, want the record and its chunks", len(items))
	}
	for _, it := range items {
		ttl, ok := it["ttl"].(*types.AttributeValueMemberN)
		if !ok {
			t.Fatalf("item %v has no ttl", it["sk"])
		}
		sec, _ := strconv.ParseInt(ttl.Value, 10, 64)
		if d := time.Until(time.Unix(sec, 0)); d < middleware.DefaultSettings().TTL-time.Minute || d > middleware.DefaultSettings().TTL+2*time.Hour {
			t.Fatalf("item %v lives %v, want about the record's ttl", it["sk"], d)
		}
	}
}

// A response larger than the store keeps is remembered as done and not
// replayable: its retries get 409, never a second execution.
func TestResponseTooLargeForTheStore(t *testing.T) {
	e := newEnv(t, dynamostore.Options{Now: time.Now, MaxResponse: 1 << 20})
	up := newAPI()
	h := wrap(t, e.store, up)
	q := "size=" + strconv.Itoa(2<<20)
	if w := send(h, "huge", q, "x"); w.Code != 201 || w.Body.Len() != 2<<20 {
		t.Fatalf("first: %d, %d bytes", w.Code, w.Body.Len())
	}
	w := send(h, "huge", q, "x")
	if w.Code != 409 || !strings.Contains(w.Body.String(), "too large to store") {
		t.Fatalf("retry: %d %s; want the not-replayable 409", w.Code, w.Body)
	}
	if n := up.count("huge"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
	if items := scan(t, e); len(items) != 1 {
		t.Fatalf("%d items; want the record alone (no chunk written for a response the store refused)", len(items))
	}
}

func scan(t testing.TB, e *env) []map[string]types.AttributeValue {
	t.Helper()
	var items []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(e.client, &dynamodb.ScanInput{TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("pk, sk, #ttl"), ExpressionAttributeNames: map[string]string{"#ttl": "ttl"}})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, out.Items...)
	}
	return items
}

// Two instances (separate clients) share one table: concurrent duplicates
// split across them run once, and each replays what the other stored.
func TestTwoInstancesShareTable(t *testing.T) {
	e := newEnv(t, dynamostore.Options{Now: time.Now})
	other, err := dynamostore.New(context.Background(), e.srv.Client(), e.table, dynamostore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	up := newAPI()
	a, b := wrap(t, e.store, up), wrap(t, other, up)
	const n = 100
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		h := a
		if i%2 == 1 {
			h = b
		}
		wg.Add(1)
		go func() { defer wg.Done(); codes <- send(h, "shared", "block=1", "x").Code }()
	}
	up.waitStarted("shared")
	got := map[int]int{}
	for i := 0; i < n-1; i++ {
		got[<-codes]++
	}
	close(up.release)
	wg.Wait()
	got[<-codes]++
	if up.count("shared") != 1 || got[201] != 1 || got[409] != n-1 {
		t.Fatalf("executions %d, answers %v; want one execution, one 201 and %d 409s", up.count("shared"), got, n-1)
	}
	for name, h := range map[string]http.Handler{"a": a, "b": b} {
		if w := send(h, "shared", "block=1", "x"); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("instance %s: %d replayed=%q", name, w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	}
}

// wait mode: a duplicate waits for the first request and gets its replay.
// On the same instance the store wakes it when the first completes; from
// another instance it sees the completion at its next poll (wait_poll). The
// added latency (from the first's answer to the waiter's) is logged.
func TestWaitLatency(t *testing.T) {
	e := newEnv(t, dynamostore.Options{Now: time.Now})
	other, err := dynamostore.New(context.Background(), e.srv.Client(), e.table, dynamostore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	up := newAPI()
	opts := []middleware.Option{func(s *middleware.Settings) { s.Wait = 10 * time.Second }} // wait_poll: the default 250ms
	first := wrap(t, e.store, up, opts...)
	for i, waiter := range []struct {
		name string
		h    http.Handler
	}{{"same instance (woken)", first}, {"other instance (polled)", wrap(t, other, up, opts...)}} {
		key := fmt.Sprint("wait-", i)
		const rounds = 5
		var total time.Duration
		for r := 0; r < rounds; r++ {
			k := fmt.Sprint(key, "-", r)
			firstDone := make(chan time.Time, 1)
			up.release = make(chan struct{})
			go func() { send(first, k, "block=1", "x"); firstDone <- time.Now() }()
			up.waitStarted(k)
			answered := make(chan *httptest.ResponseRecorder, 1)
			go func() { answered <- send(waiter.h, k, "block=1", "x") }()
			time.Sleep(100 * time.Millisecond) // the waiter is waiting
			close(up.release)
			w := <-answered
			at := time.Now()
			if w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("%s: waiter got %d replayed=%q", waiter.name, w.Code, w.Header().Get("Idempotent-Replayed"))
			}
			total += max(at.Sub(<-firstDone), 0)
			if up.count(k) != 1 {
				t.Fatalf("%s: ran %d times", waiter.name, up.count(k))
			}
		}
		t.Logf("wait mode, %s: the waiter answered %v after the first, on average of %d", waiter.name, (total / rounds).Round(time.Millisecond), rounds)
	}
}

// Throttling and 500s, which DynamoDB Local never answers, are re-sent by the
// SDK; a 500 after the write was applied too. When DynamoDB keeps refusing,
// the request is answered 503 and not executed; its retry runs once.
func TestThrottlingAndServerErrors(t *testing.T) {
	e := newEnv(t, dynamostore.Options{Now: time.Now})
	up := newAPI()
	h := wrap(t, e.store, up, func(s *middleware.Settings) { s.StoreTimeout = 5 * time.Second })
	e.faults.Inject("PutItem", dynamotest.Throttle, 1)
	e.faults.Inject("UpdateItem", dynamotest.ServerErrorAfter, 1)
	if w := send(h, "a", "", "x"); w.Code != 201 || e.faults.Injected("PutItem") != 1 || e.faults.Injected("UpdateItem") != 1 {
		t.Fatalf("throttled claim, 500 after the complete: %d, faults met %d/%d", w.Code, e.faults.Injected("PutItem"), e.faults.Injected("UpdateItem"))
	}
	if w := send(h, "a", "", "x"); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d, not a replay", w.Code)
	}
	e.faults.Inject("PutItem", dynamotest.ServerError, 1)
	if w := send(h, "b", "", "x"); w.Code != 201 {
		t.Fatalf("a 500 on the claim, re-sent: %d", w.Code)
	}
	e.faults.Inject("PutItem", dynamotest.Throttle, 100) // more than the SDK re-sends
	if w := send(h, "c", "", "x"); w.Code != 503 || up.count("c") != 0 {
		t.Fatalf("claim throttled throughout: %d, %d executions; want 503 and none", w.Code, up.count("c"))
	}
	e.faults.Clear()
	if w := send(h, "c", "", "x"); w.Code != 201 || up.count("c") != 1 {
		t.Fatalf("after the throttling: %d, %d executions", w.Code, up.count("c"))
	}
	for _, k := range []string{"a", "b"} {
		if n := up.count(k); n != 1 {
			t.Fatalf("%s ran %d times", k, n)
		}
	}
}

// A server that leaves the existing item out of a failed condition: the claim
// reads it with a consistent GetItem instead, and answers the same.
func TestConditionFailureWithoutTheItem(t *testing.T) {
	e := newEnv(t, dynamostore.Options{Now: time.Now})
	up := newAPI()
	h := wrap(t, e.store, up)
	send(h, "k", "size=1000000", "x")
	e.faults.Reset()
	e.faults.Inject("PutItem", dynamotest.StripItem, 1)
	w := send(h, "k", "size=1000000", "x")
	if w.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(w.Body.Bytes(), pattern(1000000)) {
		t.Fatalf("replay without the item in the failure: %d replayed=%q", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if c := e.faults.Calls(); e.faults.Injected("PutItem") != 1 || c["GetItem"] != 1 {
		t.Fatalf("requests %v; want the stripped PutItem and one GetItem", c)
	}
	if w := send(h, "k", "", "y"); w.Code != 422 {
		t.Fatalf("mismatch: %d", w.Code)
	}
}
