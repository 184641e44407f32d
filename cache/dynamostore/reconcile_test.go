package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
)

func reconcileJob(now time.Time, due time.Duration) *cache.Job {
	return &cache.Job{Route: "/charges", Method: "GET", URL: "/charges/lookup?key=k", Header: http.Header{"Authorization": {"Bearer t"}},
		State: cache.JobScheduled, Due: now.Add(due), Deadline: now.Add(time.Hour), Until: now.Add(24 * time.Hour)}
}

// scheduleItems is the table's schedule entries: sort key, store key.
func scheduleItems(t *testing.T, e *env) map[string]string {
	t.Helper()
	out, err := e.client.Query(context.Background(), &dynamodb.QueryInput{
		TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "idemproxy:reconcile"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, it := range out.Items {
		m[it["sk"].(*types.AttributeValueMemberS).Value] = it["k"].(*types.AttributeValueMemberS).Value
	}
	return m
}

// A reply lost after DynamoDB applied the request (the SDK re-sends it): every
// reconcile operation answers as the first request would have, and the
// schedule keeps one entry per job.
func TestReconcileLostReplies(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dynamostore.Options{})
	now := e.clock.Now()
	key := cachetest.Key(t, "k")
	job := reconcileJob(now, time.Second)
	if err := lose(t, e, func() error { return e.store.ScheduleReconcile(ctx, key, job) }, "TransactWriteItems"); err != nil {
		t.Fatalf("schedule whose reply was lost: %v", err)
	}
	if n := len(scheduleItems(t, e)); n != 1 {
		t.Fatalf("%d schedule entries, want 1", n)
	}
	e.clock.Advance(2 * time.Second)
	var (
		got    string
		gotJob *cache.Job
	)
	if err := lose(t, e, func() (err error) {
		got, gotJob, err = e.store.ClaimReconcile(ctx, e.clock.Now(), "tok-a", time.Minute)
		return err
	}, "TransactWriteItems"); err != nil || got != key || gotJob.URL != job.URL {
		t.Fatalf("claim whose reply was lost: %q %+v %v; want the job", got, gotJob, err)
	}
	if _, _, err := e.store.ClaimReconcile(ctx, e.clock.Now(), "tok-b", time.Minute); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("a second claim while the first holds it: %v, want ErrNotFound", err)
	}
	next := reconcileJob(now, time.Hour)
	next.Attempts, next.LastStatus = 1, 500
	if err := lose(t, e, func() error { return e.store.UpdateReconcile(ctx, key, "tok-a", next) }, "TransactWriteItems"); err != nil {
		t.Fatalf("update whose reply was lost: %v", err)
	}
	if j, err := e.store.GetReconcile(ctx, key); err != nil || j.Attempts != 1 || !j.Due.Equal(next.Due) {
		t.Fatalf("after the update: %+v %v", j, err)
	}
	e.clock.Advance(time.Hour)
	if got, _, err := e.store.ClaimReconcile(ctx, e.clock.Now(), "tok-c", time.Minute); err != nil || got != key {
		t.Fatalf("claim after the update: %q %v", got, err)
	}
	if err := lose(t, e, func() error { return e.store.FinishReconcile(ctx, key, "tok-c") }, "TransactWriteItems"); err != nil {
		t.Fatalf("finish whose reply was lost: %v", err)
	}
	if err := e.store.FinishReconcile(ctx, key, "tok-c"); err != nil {
		t.Fatalf("finish called again by its token: %v", err)
	}
	if _, err := e.store.GetReconcile(ctx, key); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("after finish: %v, want ErrNotFound", err)
	}
	if n := len(scheduleItems(t, e)); n != 0 {
		t.Fatalf("%d schedule entries left, want none", n)
	}
	// A key finished once is scheduled again as new.
	if err := e.store.ScheduleReconcile(ctx, key, reconcileJob(e.clock.Now(), 0)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := e.store.ClaimReconcile(ctx, e.clock.Now(), "tok-d", time.Minute); err != nil || got != key {
		t.Fatalf("claim of the job scheduled again: %q %v", got, err)
	}
}

// A schedule entry whose job is gone (DynamoDB's time to live deleted the job
// item first) is skipped and deleted by the claim that finds it; a job behind
// it is claimed.
func TestReconcileEntryWithoutJob(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dynamostore.Options{})
	now := e.clock.Now()
	gone, live := cachetest.Key(t, "gone"), cachetest.Key(t, "live")
	if err := e.store.ScheduleReconcile(ctx, gone, reconcileJob(now, time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ScheduleReconcile(ctx, live, reconcileJob(now, 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.table), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: gone}, "sk": &types.AttributeValueMemberS{Value: "j"}}}); err != nil {
		t.Fatal(err)
	}
	got, _, err := e.store.ClaimReconcile(ctx, now.Add(3*time.Second), "tok", time.Minute)
	if err != nil || got != live {
		t.Fatalf("claim = %q %v; want the live job", got, err)
	}
	for _, k := range scheduleItems(t, e) {
		if k == gone {
			t.Fatal("the entry without a job is still there")
		}
	}
	if _, err := e.store.GetReconcile(ctx, gone); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("GetReconcile of the gone job: %v", err)
	}
}

// Every job item and schedule entry carries DynamoDB's time to live: past the
// hold's end, so jobs that no instance works any more are deleted.
func TestReconcileItemsExpire(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dynamostore.Options{})
	now := e.clock.Now()
	key := cachetest.Key(t, "k")
	job := reconcileJob(now, 0)
	if err := e.store.ScheduleReconcile(ctx, key, job); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.store.ClaimReconcile(ctx, now, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	items := scan(t, e)
	if len(items) != 2 {
		t.Fatalf("%d items, want the job and its entry", len(items))
	}
	for _, it := range items {
		ttl, ok := it["ttl"].(*types.AttributeValueMemberN)
		if !ok {
			t.Fatalf("item %v has no ttl", it["sk"])
		}
		sec, _ := strconv.ParseInt(ttl.Value, 10, 64)
		if want := job.Until.Add(time.Hour).Unix() + 1; sec != want {
			t.Fatalf("item %v expires at %d, want %d (the hold's end and an hour)", it["sk"], sec, want)
		}
	}
}

// Requests and capacity of each reconcile operation, for docs/stores.md. Run
// with -v for the table.
func TestReconcileCapacity(t *testing.T) {
	ctx := context.Background()
	var m meter
	e := newEnv(t, dynamostore.Options{Capacity: m.add})
	now := e.clock.Now()
	key := cachetest.Key(t, "k")
	var report strings.Builder
	fmt.Fprintf(&report, "\n| operation | DynamoDB requests | capacity units reported |\n|---|---|---|\n")
	step := func(name string, op func() error, want map[string]int) {
		t.Helper()
		e.faults.Reset()
		m.take()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := e.faults.Calls()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: requests %v, want %v", name, got, want)
		}
		var parts []string
		for c, n := range got {
			parts = append(parts, fmt.Sprintf("%d %s", n, c))
		}
		sort.Strings(parts)
		rep, _ := m.take()
		fmt.Fprintf(&report, "| %s | %s | %.1f |\n", name, strings.Join(parts, " + "), rep)
	}
	step("claim, none due (a worker's poll)", func() error {
		_, _, err := e.store.ClaimReconcile(ctx, now, "t0", time.Minute)
		if errors.Is(err, cache.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("claim with none due: %v", err)
	}, map[string]int{"Query": 1})
	step("schedule", func() error { return e.store.ScheduleReconcile(ctx, key, reconcileJob(now, 0)) },
		map[string]int{"GetItem": 1, "TransactWriteItems": 1})
	step("claim", func() error { _, _, err := e.store.ClaimReconcile(ctx, now, "t1", time.Minute); return err },
		map[string]int{"Query": 1, "GetItem": 1, "TransactWriteItems": 1})
	step("update (try again later)", func() error { return e.store.UpdateReconcile(ctx, key, "t1", reconcileJob(now, 0)) },
		map[string]int{"GetItem": 1, "TransactWriteItems": 1})
	if _, _, err := e.store.ClaimReconcile(ctx, now, "t2", time.Minute); err != nil {
		t.Fatal(err)
	}
	step("finish", func() error { return e.store.FinishReconcile(ctx, key, "t2") },
		map[string]int{"GetItem": 1, "TransactWriteItems": 1})
	t.Log(report.String())
}
