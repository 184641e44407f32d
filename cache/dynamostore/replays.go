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
	"github.com/idemproxy/idemproxy/cache/internal/replays"
)

var _ cache.ReplayCounter = (*Store)(nil)

// replayFlushTimeout bounds one write of the replay counts.
const replayFlushTimeout = 30 * time.Second

// CountReplay implements cache.ReplayCounter: the count is added up in
// memory, and the counts are written every cache.ReplayFlush and at Close,
// one UpdateItem per key replayed since the last (DynamoDB has no batched
// update): a replay costs no request, a key replayed any number of times
// in a flush's interval costs one.
func (s *Store) CountReplay(key string, created, at time.Time) {
	if checkKey(key) != nil {
		return
	}
	s.replayBatch().Add(key, created, at)
}

// FlushReplays implements cache.ReplayCounter.
func (s *Store) FlushReplays(ctx context.Context) error { return s.replayBatch().Flush(ctx) }

func (s *Store) replayBatch() *replays.Batch {
	s.replaysOnce.Do(func() { s.replays = replays.New(cache.ReplayFlush, replayFlushTimeout, s.writeReplays) })
	return s.replays
}

// condCount: the completed record created then (another record under the
// key, or none, is left alone); condCountLater: and no later replay is
// recorded (DynamoDB's update has no max: the latest is set only then).
const (
	condCount      = "#st = :two AND #ca = :ca"
	condCountLater = condCount + " AND (attribute_not_exists(#rl) OR #rl < :at)"
)

// writeReplays writes counts, one conditional update each (two when a later
// replay is recorded already: the count is added without it).
func (s *Store) writeReplays(ctx context.Context, counts []replays.Count) error {
	var errs []error
	for _, c := range counts {
		err := s.writeCount(ctx, c, "ADD #rc :n SET #rl = :at", condCountLater)
		if _, ccf := isCCF(err); ccf {
			err = s.writeCount(ctx, c, "ADD #rc :n", condCount)
		}
		if _, ccf := isCCF(err); ccf {
			continue // replaced or gone meanwhile
		}
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dynamostore: writing replay counts: %w", err)
	}
	return nil
}

func (s *Store) writeCount(ctx context.Context, c replays.Count, update, cond string) error {
	values := map[string]types.AttributeValue{":two": avN(stateCompleted), ":ca": avN(ms(c.Created)), ":n": avN(c.N)}
	if cond == condCountLater {
		values[":at"] = avN(ms(c.Last))
	}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       itemKey(c.Key, recordSK),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names(update, cond),
		ExpressionAttributeValues: values,
		ReturnConsumedCapacity:    s.rcc(),
	})
	if err == nil {
		s.report("count", "UpdateItem", out.ConsumedCapacity)
	}
	return err
}
