package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache"
)

// DynamoDB's batch bounds, and the store's.
const (
	batchWriteMax = 25 // items per BatchWriteItem
	// batchWriteBytes bounds the response bytes one BatchWriteItem carries
	// (5 chunks). A throttled partition takes about 1 MB a second and leaves
	// the rest unprocessed, to be sent again: a smaller request sends less
	// again, and fits within RequestTimeout on a modest link.
	batchWriteBytes = 2 << 20
	batchGetMax     = 100 // keys per BatchGetItem (and 16 MB per answer)
	// batchTries bounds the rounds in a row that a batch makes no progress
	// (every item left unprocessed, or, for chunk writes, the request
	// throttled past the SDK's re-sends), with a growing pause between them.
	// A round that writes something starts the count again: a write the
	// table takes slowly goes on as long as it goes forward.
	batchTries = 8
)

// errChunkMissing: a chunk item a live record names is not there (the record
// was deleted or replaced while it was read).
var errChunkMissing = errors.New("dynamostore: a chunk of the response is missing")

// writeChunks puts blob's chunk items, living until expMs plus chunkGrace.
// The chunks of the same set that an earlier call confirmed and no record
// names yet are not written again (resume.go).
func (s *Store) writeChunks(ctx context.Context, key, version string, blob []byte, expMs int64) error {
	n := (len(blob) + ChunkSize - 1) / ChunkSize
	id := key + "\x00" + version
	p := s.unfinished.take(id, n, s.now())
	ttl := avN(ttlSeconds(expMs + chunkGrace.Milliseconds()))
	var reqs []types.WriteRequest
	index := map[string]int{}
	for i := range n {
		if p.written[i] {
			continue
		}
		sk := chunkSK(version, i)
		index[sk] = i
		it := itemKey(key, sk)
		it[attrData] = avB(blob[i*ChunkSize : min((i+1)*ChunkSize, len(blob))])
		it[attrTTL] = ttl
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
	}
	err := s.batchWrite(ctx, "chunks-write", reqs, true, func(done []types.WriteRequest) {
		for _, w := range done {
			if i, ok := index[requestSK(w)]; ok {
				p.written[i] = true
			}
		}
	})
	if err != nil {
		s.unfinished.keep(id, p)
	}
	return err
}

// deleteChunks deletes a chunk set, for tidiness: its items expire anyway.
func (s *Store) deleteChunks(ctx context.Context, key, version string, n int) {
	reqs := make([]types.WriteRequest, n)
	for i := range reqs {
		reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: itemKey(key, chunkSK(version, i))}}
	}
	_ = s.batchWrite(ctx, "chunks-delete", reqs, false, nil)
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

// batchWrite sends reqs in batches of at most batchWriteMax items and
// batchWriteBytes of chunk data, each until DynamoDB has processed all of it
// or batchTries rounds in a row made no progress; done, when set, is told of
// the requests each round processed. persist treats a throttled request (after
// the SDK's re-sends) as a round without progress rather than a failure: a
// chunk write goes on at the pace the partition takes it; a best-effort
// delete does not hold its caller up.
func (s *Store) batchWrite(ctx context.Context, op string, reqs []types.WriteRequest, persist bool, done func([]types.WriteRequest)) error {
	for len(reqs) > 0 {
		n, size := 0, 0
		for n < len(reqs) && n < batchWriteMax {
			size += requestBytes(reqs[n])
			if n > 0 && size > batchWriteBytes {
				break
			}
			n++
		}
		batch := reqs[:n]
		reqs = reqs[n:]
		for idle := 0; len(batch) > 0; {
			if idle == batchTries {
				return fmt.Errorf("dynamostore: %s: %d items left unprocessed after %d tries without progress", op, len(batch), idle)
			}
			if idle > 0 {
				if err := pause(ctx, idle); err != nil {
					return err
				}
			}
			out, err := s.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
				RequestItems:           map[string][]types.WriteRequest{s.table: batch},
				ReturnConsumedCapacity: s.rcc(),
			})
			if err != nil {
				if persist && ctx.Err() == nil && retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary {
					idle++
					continue
				}
				return fmt.Errorf("dynamostore: %s: %w", op, err)
			}
			s.reportList(op, "BatchWriteItem", out.ConsumedCapacity)
			left := out.UnprocessedItems[s.table]
			if len(left) < len(batch) {
				if done != nil {
					done(processed(batch, left))
				}
				idle = 0
			} else {
				idle++
			}
			batch = left
		}
	}
	return nil
}

// processed is the requests of batch that are not among those left.
func processed(batch, left []types.WriteRequest) []types.WriteRequest {
	if len(left) == 0 {
		return batch
	}
	unprocessed := make(map[string]bool, len(left))
	for _, w := range left {
		unprocessed[requestSK(w)] = true
	}
	var out []types.WriteRequest
	for _, w := range batch {
		if !unprocessed[requestSK(w)] {
			out = append(out, w)
		}
	}
	return out
}

// requestSK is the sort key a write request writes or deletes (its items all
// share the partition key).
func requestSK(w types.WriteRequest) string {
	switch {
	case w.PutRequest != nil:
		sk, _ := item(w.PutRequest.Item).s(attrSK)
		return sk
	case w.DeleteRequest != nil:
		sk, _ := item(w.DeleteRequest.Key).s(attrSK)
		return sk
	}
	return ""
}

// requestBytes is the chunk data a write request carries.
func requestBytes(w types.WriteRequest) int {
	if w.PutRequest != nil {
		return len(item(w.PutRequest.Item).b(attrData))
	}
	return 0
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
