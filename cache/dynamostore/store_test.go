package dynamostore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/logging"
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/cachetest"
	"github.com/idemproxy/idemproxy/cache/dynamostore"
	"github.com/idemproxy/idemproxy/cache/dynamostore/dynamotest"
)

func chunkItems(t *testing.T, e *env) int {
	t.Helper()
	n := 0
	for _, it := range scan(t, e) {
		if sk := it["sk"].(*types.AttributeValueMemberS).Value; strings.HasPrefix(sk, "c#") {
			n++
		}
	}
	return n
}

// A key claimed again after its chunked record lapsed never replays the old
// record's chunks, even when their clean-up failed: chunk keys carry the
// version of what wrote them. Delete removes the chunks of what it deletes.
func TestReclaimedKeyReadsItsOwnChunks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dynamostore.Options{})
	key := cachetest.Key(t, "k")
	old := pattern(1 << 20)
	tok := claimed(t, e.store, key)
	if err := e.store.Complete(ctx, key, tok, done(200, old), time.Minute); err != nil {
		t.Fatal(err)
	}
	perRecord := chunkItems(t, e)
	if perRecord != 3 {
		t.Fatalf("%d chunk items for 1 MiB, want 3", perRecord)
	}
	e.clock.Advance(2 * time.Minute)
	e.faults.Inject("BatchWriteItem", dynamotest.Throttle, 100) // the lapsed record's chunks stay
	tok = claimed(t, e.store, key)
	e.faults.Clear()
	if n := chunkItems(t, e); n != perRecord {
		t.Fatalf("%d chunk items; the clean-up was meant to fail", n)
	}
	fresh := bytes.Repeat([]byte("new record "), len(old)/11+1)[:len(old)]
	if err := e.store.Complete(ctx, key, tok, done(201, fresh), ttl); err != nil {
		t.Fatal(err)
	}
	rec, err := e.store.Get(ctx, key)
	if err != nil || rec.Response.Status != 201 || !bytes.Equal(rec.Response.Body, fresh) {
		t.Fatalf("the reclaimed key reads %v %v, want the new record's body", rec, err)
	}
	if err := e.store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := chunkItems(t, e); n != perRecord {
		t.Fatalf("%d chunk items after Delete; want only the old record's %d left (their clean-up failed)", n, perRecord)
	}
	// A lapsed chunked record overwritten by a claim has its chunks deleted.
	tok = claimed(t, e.store, key)
	if err := e.store.Complete(ctx, key, tok, done(200, old), time.Minute); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	claimed(t, e.store, key)
	if n := chunkItems(t, e); n != perRecord {
		t.Fatalf("%d chunk items; the overwritten record's were not deleted", n)
	}
}

// Bad input is an error, never a panic.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dynamostore.Options{})
	for _, key := range []string{"", strings.Repeat("k", dynamostore.MaxKey+1), "bad\xffutf8"} {
		if _, _, err := e.store.ClaimOrGet(ctx, key, cache.Claim{Token: "t", Duration: lease}); err == nil {
			t.Fatalf("ClaimOrGet(%q) accepted", key)
		}
		if _, err := e.store.Get(ctx, key); err == nil || errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Get(%.10q): %v", key, err)
		}
	}
	if _, _, err := e.store.ClaimOrGet(ctx, "k", cache.Claim{Duration: lease}); err == nil {
		t.Fatal("claim with an empty token accepted")
	}
	if err := e.store.Complete(ctx, "k", "t", nil, ttl); err == nil {
		t.Fatal("Complete(nil) accepted")
	}
	if err := e.store.Complete(ctx, "k", "", done(200, nil), ttl); !errors.Is(err, cache.ErrClaimLost) {
		t.Fatalf("Complete with an empty token: %v", err)
	}
	if err := e.store.Resolve(ctx, "k", unknown().Response, ttl); err == nil {
		t.Fatal("resolving with an unknown outcome accepted")
	}
	for _, o := range []dynamostore.Options{{InlineLimit: -1}, {InlineLimit: dynamostore.MaxInlineLimit + 1}, {MaxResponse: -1}, {MaxResponse: dynamostore.MaxMaxResponse + 1}} {
		if _, err := dynamostore.New(ctx, e.client, e.table, o); err == nil {
			t.Fatalf("options %+v accepted", o)
		}
	}
	for _, bad := range []string{"", "ab", "a b", "tab;le", strings.Repeat("t", 256)} {
		if _, err := dynamostore.New(ctx, e.client, bad, dynamostore.Options{}); err == nil {
			t.Fatalf("table %q accepted", bad)
		}
		if _, err := dynamostore.Schema(bad); err == nil {
			t.Fatalf("Schema(%q) accepted", bad)
		}
	}
}

// Open takes region, endpoint and credentials from the standard AWS chain
// (here AWS_ENDPOINT_URL_DYNAMODB and AWS_REGION), creates a missing table with
// its time to live on, and stops with one line when the table is missing and
// creation is off.
func TestOpen(t *testing.T) {
	srv := dynamotest.Start(t)
	srv.Env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	table := freshTable()
	// DynamoDB Local's error answers carry no CRC32 header, which the SDK
	// then logs as a checksum mismatch when it closes them: quiet here.
	quiet := dynamostore.Options{ClientOptions: []func(*dynamodb.Options){func(o *dynamodb.Options) { o.Logger = logging.Nop{} }}}
	_, err := dynamostore.Open(ctx, table, quiet)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "idemproxy migrate") || !strings.Contains(err.Error(), table) {
		t.Fatalf("missing table, creation off: %v; want one line naming the table and idemproxy migrate", err)
	}
	// Instances starting together create the table once, without an error.
	var wg sync.WaitGroup
	stores := make([]*dynamostore.Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = dynamostore.Open(ctx, table, dynamostore.Options{CreateTable: true})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open with creation: %v", err)
		}
	}
	s := stores[0]
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, loaded, err := s.ClaimOrGet(ctx, "k", cache.Claim{Token: "t", Fingerprint: "f", Duration: lease}); err != nil || loaded {
		t.Fatalf("claim: %v %v", loaded, err)
	}
	if _, loaded, _ := stores[1].ClaimOrGet(ctx, "k", cache.Claim{Token: "u", Fingerprint: "f", Duration: lease}); !loaded {
		t.Fatal("another instance claimed a held key")
	}
	ttl, err := srv.Client().DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil || ttl.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "ttl" {
		t.Fatalf("time to live of the created table: %+v %v", ttl, err)
	}
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	if _, err := dynamostore.Open(ctx, table, quiet); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Fatalf("no region: %v", err)
	}
}

// A table of another shape is refused; a table whose time to live is off is
// used, with a warning.
func TestExistingTables(t *testing.T) {
	srv := dynamotest.Start(t)
	client := srv.Client()
	ctx := context.Background()
	other := freshTable()
	if _, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(other),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest}); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamostore.New(ctx, client, other, dynamostore.Options{CreateTable: true}); err == nil || !strings.Contains(err.Error(), "key schema") {
		t.Fatalf("a table of another shape: %v", err)
	}
	plain := freshTable()
	def, _ := dynamostore.TableDefinition(plain)
	if _, err := client.CreateTable(ctx, def.Create); err != nil {
		t.Fatal(err)
	}
	var warned []string
	if _, err := dynamostore.New(ctx, client, plain, dynamostore.Options{Warn: func(msg string, _ ...any) { warned = append(warned, msg) }}); err != nil {
		t.Fatal(err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "time to live is off") {
		t.Fatalf("warnings %q; want the time to live one", warned)
	}
}

// What Schema prints creates a table the store accepts (the JSON inputs of
// create-table and update-time-to-live, applied here through the SDK).
func TestSchemaCreatesATableTheStoreAccepts(t *testing.T) {
	srv := dynamotest.Start(t)
	client := srv.Client()
	ctx := context.Background()
	table := freshTable()
	text, err := dynamostore.Schema(table)
	if err != nil {
		t.Fatal(err)
	}
	inputs := regexp.MustCompile(`--cli-input-json '([^']*)'`).FindAllStringSubmatch(text, -1)
	if len(inputs) != 2 {
		t.Fatalf("want two commands with JSON input:\n%s", text)
	}
	var create dynamodb.CreateTableInput
	var ttl dynamodb.UpdateTimeToLiveInput
	if err := json.Unmarshal([]byte(inputs[0][1]), &create); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(inputs[1][1]), &ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CreateTable(ctx, &create); err != nil {
		t.Fatalf("create-table input: %v\n%s", err, inputs[0][1])
	}
	if _, err := client.UpdateTimeToLive(ctx, &ttl); err != nil {
		t.Fatalf("update-time-to-live input: %v\n%s", err, inputs[1][1])
	}
	var warned int
	if _, err := dynamostore.New(ctx, client, table, dynamostore.Options{Warn: func(string, ...any) { warned++ }}); err != nil || warned != 0 {
		t.Fatalf("the store on the printed table: %v, %d warnings", err, warned)
	}
}

// With the machine's clock and time to live on, DynamoDB Local deletes an
// expired record item by itself; the store stops answering it at once, before
// that deletion (reads check the expiry). On a server of its own: DynamoDB
// Local's sweep of expired items goes through every table, and the package's
// shared server has a hundred.
func TestTTLDeletion(t *testing.T) {
	srv := dynamotest.StartOwn(t)
	client := srv.Client()
	ctx := context.Background()
	table := freshTable()
	s, err := dynamostore.New(ctx, client, table, dynamostore.Options{CreateTable: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ClaimOrGet(ctx, "k", cache.Claim{Token: "t", Fingerprint: "f", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "k", "t", done(201, []byte("x")), time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := s.Get(ctx, "k"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get after the record's ttl: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "r"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Item) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("DynamoDB Local did not delete the expired item within 60s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
