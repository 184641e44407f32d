package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/internal/replays"
	"github.com/idemproxy/idemproxy/cache/internal/waiters"
)

// Limits and defaults.
const (
	// DefaultInlineLimit: encoded responses up to this size live in the record
	// item itself.
	DefaultInlineLimit = 4 << 10
	// MaxInlineLimit bounds InlineLimit, keeping the record item well under
	// DynamoDB's 400 KB with its other attributes.
	MaxInlineLimit = 300 << 10
	// ChunkSize is the most response bytes one chunk item holds (400 KB less
	// room for its key and attribute names).
	ChunkSize = 396 << 10
	// DefaultMaxResponse is the largest encoded response (body, headers and
	// trailers) the store keeps; above it Complete answers cache.ErrFull.
	DefaultMaxResponse = 16 << 20
	// MaxMaxResponse bounds MaxResponse.
	MaxMaxResponse = 256 << 20
	// MaxKey is the longest store key (the middleware's are 64 bytes).
	MaxKey = 1024
)

// Options configure a Store. The zero value is usable: defaults apply to zero
// fields, and the table must exist.
type Options struct {
	// CreateTable creates the table (on-demand billing, time to live on its
	// ttl attribute) when it does not exist. Off, a missing table is an error
	// naming `idemproxy migrate`.
	CreateTable bool
	// InlineLimit is the largest encoded response kept in the record item
	// itself, answered by the claim's one request. Larger ones are split over
	// chunk items read with a second request. A small record item keeps the
	// claim cheap: DynamoDB charges a failed conditional write (a replay, 409
	// or 422) for the size of the item it found. 0 means DefaultInlineLimit; at
	// most MaxInlineLimit.
	InlineLimit int
	// MaxResponse is the largest encoded response stored; above it Complete
	// answers cache.ErrFull and the middleware stores its not-replayable
	// marker instead (retries get 409, never a second execution). 0 means
	// DefaultMaxResponse; at most MaxMaxResponse.
	MaxResponse int
	// RequestTimeout bounds each request the store sends to DynamoDB, with
	// the SDK's re-sends of it (cache.RequestBounded): a call of many
	// requests, such as a Complete that writes a large response's chunks at
	// the pace the table takes them, is bounded per request rather than as a
	// whole. 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Now is the clock that judges leases and records (tests inject one).
	// DynamoDB has no server clock a condition can read, so every process
	// sharing the table must keep its clock in time (NTP). nil: time.Now.
	Now func() time.Time
	// Capacity, when set, receives the capacity every request consumed
	// (requests then ask for ReturnConsumedCapacity).
	Capacity func(Consumed)
	// Warn receives what the store tolerates but an operator should know
	// (the table's time to live is off). Optional.
	Warn func(msg string, args ...any)
	// ClientOptions adjust the DynamoDB client Open builds (an HTTP client,
	// tracing middleware, retries). Open only.
	ClientOptions []func(*dynamodb.Options)
	// ConfigOptions adjust the loading of the AWS configuration in Open (a
	// profile, a region). Open only.
	ConfigOptions []func(*config.LoadOptions) error
}

// Consumed is the capacity one DynamoDB request consumed.
type Consumed struct {
	// Operation is the store's: claim, complete, release, extend, resolve,
	// get, delete, ping; chunks-write, chunks-read and chunks-delete for a
	// large response's chunk items; reconcile-schedule, reconcile-claim,
	// reconcile-update, reconcile-finish and reconcile-get for reconcile jobs.
	Operation string
	// Call is DynamoDB's: PutItem, UpdateItem, DeleteItem, GetItem,
	// BatchGetItem, BatchWriteItem, Query, TransactWriteItems.
	Call string
	// Units consumed: read units for GetItem, BatchGetItem and Query, write
	// units for the others.
	Units float64
	// Estimated is true for a failed conditional write: DynamoDB charges it
	// but does not report it, so Units is figured by its rule (the larger of
	// the existing and the new item, in 1 KB units, at least 1).
	Estimated bool
}

// Client is the part of the DynamoDB API the store uses; *dynamodb.Client
// implements it.
type Client interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
}

// Store is the DynamoDB cache.Store.
type Store struct {
	client     Client // every call bounded by opts.RequestTimeout
	table      string
	region     string
	opts       Options
	waiters    waiters.Registry[string]
	unfinished unfinished // chunk sets a failed Complete left part-written

	replaysOnce sync.Once
	replays     *replays.Batch // the replay counts not written yet (replays.go)
}

var (
	_ cache.Store    = (*Store)(nil)
	_ cache.Notifier = (*Store)(nil)
)

// Open loads the standard AWS configuration (AWS_REGION, AWS_PROFILE,
// AWS_ENDPOINT_URL_DYNAMODB, the shared config and credentials files, web
// identity, container and instance roles), builds a DynamoDB client and
// returns the store on table (see New).
func Open(ctx context.Context, table string, opts Options) (*Store, error) {
	if err := CheckTable(table); err != nil {
		return nil, err
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	client, err := NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	return New(ctx, client, table, opts)
}

// NewClient builds the DynamoDB client Open uses: the standard AWS
// configuration with opts.ConfigOptions, and opts.ClientOptions. Nothing is
// sent (credentials are fetched at the first request). A configuration that
// names no region is an error.
func NewClient(ctx context.Context, opts Options) (*dynamodb.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, opts.ConfigOptions...)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("dynamostore: no AWS region: set AWS_REGION (or a region in the AWS profile)")
	}
	return dynamodb.NewFromConfig(cfg, opts.ClientOptions...), nil
}

// New returns a store on table through client. It checks that the table
// exists with the store's key schema, creating it first when it is missing and
// opts.CreateTable is set; an unreachable DynamoDB fails here (ctx bounds the
// wait).
func New(ctx context.Context, client Client, table string, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("dynamostore: nil client")
	}
	if err := CheckTable(table); err != nil {
		return nil, err
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.InlineLimit == 0 {
		opts.InlineLimit = DefaultInlineLimit
	}
	if opts.MaxResponse == 0 {
		opts.MaxResponse = DefaultMaxResponse
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{client: boundedClient{c: client, d: opts.RequestTimeout}, table: table, opts: opts}
	if c, ok := client.(*dynamodb.Client); ok {
		s.region = c.Options().Region
	}
	if err := s.ensureTable(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (o *Options) check() error {
	switch {
	case o.InlineLimit < 0 || o.InlineLimit > MaxInlineLimit:
		return fmt.Errorf("dynamostore: inline limit must be between 1 and %d bytes (0: the default), got %d", MaxInlineLimit, o.InlineLimit)
	case o.MaxResponse < 0 || o.MaxResponse > MaxMaxResponse:
		return fmt.Errorf("dynamostore: max response must be between 1 and %d bytes (0: the default), got %d", MaxMaxResponse, o.MaxResponse)
	case o.RequestTimeout < 0:
		return fmt.Errorf("dynamostore: request timeout must be positive (0: the default), got %v", o.RequestTimeout)
	}
	return nil
}

// Table is the store's table.
func (s *Store) Table() string { return s.table }

// Close writes the replay counts not written yet (replays.go); it releases
// nothing else the caller does not own (the client is the caller's, or
// Open's and needs no closing). It is idempotent.
func (s *Store) Close() error {
	s.replayBatch().Close()
	return nil
}

// Subscribe implements cache.Notifier for this process: Complete, Release,
// Resolve and Delete through this Store wake its waiters at once. DynamoDB
// announces nothing, so a change made by another instance is seen at the
// waiter's next poll (the middleware's wait_poll).
func (s *Store) Subscribe(key string) (<-chan struct{}, func()) {
	return s.waiters.Subscribe(key)
}

// Ping implements cache.Store with one eventually consistent GetItem of a key
// no record uses (half a read unit): it proves the table answers and the
// credentials may read it.
func (s *Store) Ping(ctx context.Context) error {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:              aws.String(s.table),
		Key:                    itemKey(pingKey, pingKey),
		ReturnConsumedCapacity: s.rcc(),
	})
	if err != nil {
		return fmt.Errorf("dynamostore: ping: %w", err)
	}
	s.report("ping", "GetItem", out.ConsumedCapacity)
	return nil
}

// pingKey is a partition key no record has (store keys are not empty, and
// this one is not a record's sort key either).
const pingKey = "idemproxy:ping"

func (s *Store) now() time.Time { return s.opts.Now() }

func (s *Store) rcc() types.ReturnConsumedCapacity {
	if s.opts.Capacity == nil {
		return types.ReturnConsumedCapacityNone
	}
	return types.ReturnConsumedCapacityTotal
}

func (s *Store) report(op, call string, cc *types.ConsumedCapacity) {
	if s.opts.Capacity == nil || cc == nil {
		return
	}
	s.opts.Capacity(Consumed{Operation: op, Call: call, Units: aws.ToFloat64(cc.CapacityUnits)})
}

func (s *Store) reportList(op, call string, ccs []types.ConsumedCapacity) {
	for i := range ccs {
		s.report(op, call, &ccs[i])
	}
}

// reportFailed reports a failed conditional write's estimated cost.
func (s *Store) reportFailed(op, call string, existing, written map[string]types.AttributeValue) {
	if s.opts.Capacity == nil {
		return
	}
	size := max(itemSize(existing), itemSize(written))
	units := float64((size + 1023) / 1024)
	s.opts.Capacity(Consumed{Operation: op, Call: call, Units: max(units, 1), Estimated: true})
}

// checkKey validates a store key: a partition key value of DynamoDB's (UTF-8,
// not empty), short enough to leave room in a chunk item.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("dynamostore: empty key")
	case len(key) > MaxKey:
		return fmt.Errorf("dynamostore: key of %d bytes; at most %d", len(key), MaxKey)
	case !utf8.ValidString(key):
		return errors.New("dynamostore: key is not valid UTF-8")
	}
	return nil
}
