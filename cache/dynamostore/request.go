package dynamostore

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemproxy/idemproxy/cache"
)

// DefaultRequestTimeout bounds each DynamoDB request when
// Options.RequestTimeout is 0: the core's default store_timeout.
const DefaultRequestTimeout = 5 * time.Second

var _ cache.RequestBounded = (*Store)(nil)

// BoundsRequests implements cache.RequestBounded: every request the store
// sends (with the SDK's re-sends of it) is bounded by Options.RequestTimeout,
// so a Complete that writes a large response over many requests, at the pace
// the table takes them, needs no deadline for the whole call.
func (s *Store) BoundsRequests() {}

// boundedClient bounds each call of a Client by d.
type boundedClient struct {
	c Client
	d time.Duration
}

func (b boundedClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.GetItem(ctx, in, o...)
}

func (b boundedClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.PutItem(ctx, in, o...)
}

func (b boundedClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.UpdateItem(ctx, in, o...)
}

func (b boundedClient) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.DeleteItem(ctx, in, o...)
}

func (b boundedClient) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.BatchGetItem(ctx, in, o...)
}

func (b boundedClient) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.BatchWriteItem(ctx, in, o...)
}

func (b boundedClient) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.Query(ctx, in, o...)
}

func (b boundedClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.TransactWriteItems(ctx, in, o...)
}

func (b boundedClient) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.DescribeTable(ctx, in, o...)
}

func (b boundedClient) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.CreateTable(ctx, in, o...)
}

func (b boundedClient) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.UpdateTimeToLive(ctx, in, o...)
}

func (b boundedClient) DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.c.DescribeTimeToLive(ctx, in, o...)
}
