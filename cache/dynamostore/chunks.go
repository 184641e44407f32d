package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache"
)

// DynamoDB's batch bounds.
const (
	batchWriteMax = 25  // items per BatchWriteItem
	batchGetMax   = 100 // keys per BatchGetItem (and 16 MB per answer)
	// batchTries bounds the rounds spent on items a batch left unprocessed
	// (throttling), with a growing pause between them.
	batchTries = 8
)

// errChunkMissing: a chunk item a live record names is not there (the record
// was deleted or replaced while it was read).
var errChunkMissing = errors.New("dynamostore: a chunk of the response is missing")

// writeChunks puts blob's chunk items, living until expMs plus chunkGrace.
func (s *Store) writeChunks(ctx context.Context, key, version string, blob []byte, expMs int64) error {
	ttl := avN(ttlSeconds(expMs + chunkGrace.Milliseconds()))
	var reqs []types.WriteRequest
	for i := 0; i*ChunkSize < len(blob); i++ {
		part := blob[i*ChunkSize : min((i+1)*ChunkSize, len(blob))]
		it := itemKey(key, chunkSK(version, i))
		it[attrData] = avB(part)
		it[attrTTL] = ttl
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
	}
	return s.batchWrite(ctx, "chunks-write", reqs)
}

// deleteChunks deletes a chunk set, for tidiness: its items expire anyway.
func (s *Store) deleteChunks(ctx context.Context, key, version string, n int) {
	reqs := make([]types.WriteRequest, n)
	for i := range reqs {
		reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: itemKey(key, chunkSK(version, i))}}
	}
	_ = s.batchWrite(ctx, "chunks-delete", reqs)
}

// dropChunksOf deletes the chunks of a record item that was replaced or
// deleted, unless they are the ones that now hold the key's response.
func (s *Store) dropChunksOf(ctx context.Context, key string, old map[string]types.AttributeValue, keep string) {
	if v, n, _, ok := item(old).chunked(); ok && v != keep {
		s.deleteChunks(ctx, key, v, n)
	}
}

// dropUnused deletes the chunks r wrote when the record that stands (cur)
// does not use them.
func (s *Store) dropUnused(ctx context.Context, key string, cur item, r response) {
	if v, _, _, _ := cur.chunked(); r.version != "" && v != r.version {
		s.discard(ctx, key, r)
	}
}

func (s *Store) batchWrite(ctx context.Context, op string, reqs []types.WriteRequest) error {
	for len(reqs) > 0 {
		batch := reqs[:min(batchWriteMax, len(reqs))]
		reqs = reqs[len(batch):]
		for try := 0; len(batch) > 0; try++ {
			if try == batchTries {
				return fmt.Errorf("dynamostore: %s: %d items left unprocessed after %d tries", op, len(batch), try)
			}
			if try > 0 {
				if err := pause(ctx, try); err != nil {
					return err
				}
			}
			out, err := s.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
				RequestItems:           map[string][]types.WriteRequest{s.table: batch},
				ReturnConsumedCapacity: s.rcc(),
			})
			if err != nil {
				return fmt.Errorf("dynamostore: %s: %w", op, err)
			}
			s.reportList(op, "BatchWriteItem", out.ConsumedCapacity)
			batch = out.UnprocessedItems[s.table]
		}
	}
	return nil
}

// readChunks reads a chunk set with strongly consistent reads and joins it.
func (s *Store) readChunks(ctx context.Context, key, version string, n int, size int64) ([]byte, error) {
	if n <= 0 || size <= 0 || size > int64(n)*ChunkSize || size <= int64(n-1)*ChunkSize {
		return nil, fmt.Errorf("%w: %d chunks for %d bytes", cache.ErrCorrupt, n, size)
	}
	parts := make([][]byte, n)
	index := make(map[string]int, n)
	var keys []map[string]types.AttributeValue
	for i := 0; i < n; i++ {
		sk := chunkSK(version, i)
		index[sk] = i
		keys = append(keys, itemKey(key, sk))
	}
	for len(keys) > 0 {
		batch := keys[:min(batchGetMax, len(keys))]
		keys = keys[len(batch):]
		for try := 0; len(batch) > 0; try++ {
			if try == batchTries {
				return nil, fmt.Errorf("dynamostore: chunks-read: %d keys left unprocessed after %d tries", len(batch), try)
			}
			if try > 0 {
				if err := pause(ctx, try); err != nil {
					return nil, err
				}
			}
			out, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
				RequestItems: map[string]types.KeysAndAttributes{s.table: {
					Keys: batch, ConsistentRead: aws.Bool(true),
					ProjectionExpression:     aws.String("#sk, #d"),
					ExpressionAttributeNames: map[string]string{"#sk": attrSK, "#d": attrData},
				}},
				ReturnConsumedCapacity: s.rcc(),
			})
			if err != nil {
				return nil, fmt.Errorf("dynamostore: reading the response's chunks: %w", err)
			}
			s.reportList("chunks-read", "BatchGetItem", out.ConsumedCapacity)
			for _, it := range out.Responses[s.table] {
				sk, _ := item(it).s(attrSK)
				if i, ok := index[sk]; ok {
					parts[i] = item(it).b(attrData)
				}
			}
			batch = out.UnprocessedKeys[s.table].Keys
		}
	}
	blob := make([]byte, 0, size)
	for i, p := range parts {
		want := ChunkSize
		if i == n-1 {
			want = int(size) - (n-1)*ChunkSize
		}
		if p == nil {
			return nil, errChunkMissing
		}
		if len(p) != want {
			return nil, fmt.Errorf("%w: chunk %d has %d bytes, want %d", cache.ErrCorrupt, i, len(p), want)
		}
		blob = append(blob, p...)
	}
	return blob, nil
}

// pause waits before a batch's next try: 25 ms, doubling, at most a second.
func pause(ctx context.Context, try int) error {
	d := min(25*time.Millisecond<<(try-1), time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
