package dynamostore

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache"
)

// Release implements cache.Store: one conditional DeleteItem.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if token == "" {
		return cache.ErrClaimLost
	}
	if err := checkKey(key); err != nil {
		return err
	}
	now := s.now()
	out, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 itemKey(key, recordSK),
		ConditionExpression:                 aws.String(condRelease),
		ExpressionAttributeNames:            names(condRelease),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": avN(ms(now)), ":one": avN(stateInFlight), ":tok": avB([]byte(token))},
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.rcc(),
	})
	if err == nil {
		s.report("release", "DeleteItem", out.ConsumedCapacity)
		s.dropChunksOf(ctx, key, out.Attributes, "") // a lapsed record's
		s.waiters.Notify(key)
		return nil
	}
	return s.lockLost("release", "DeleteItem", "releasing", err)
}

// Extend implements cache.Store: one conditional UpdateItem. A re-sent
// request carries the same :now and :ex, so it finds the claim it set and
// sets it again.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	if token == "" {
		return cache.ErrClaimLost
	}
	if err := checkKey(key); err != nil {
		return err
	}
	now := s.now()
	le := ms(now) + durMs(lease)
	// The hold moves with the claim: ex and ttl keep their distance from le.
	const update = "SET #le = :le, #ex = if_not_exists(#hd, :zero) + :le, #ttl = if_not_exists(#hs, :zero) + :ttl"
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      itemKey(key, recordSK),
		UpdateExpression:         aws.String(update),
		ConditionExpression:      aws.String(condExtend),
		ExpressionAttributeNames: names(update, condExtend),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": avN(ms(now)), ":one": avN(stateInFlight), ":tok": avB([]byte(token)),
			":le": avN(le), ":ttl": avN(ttlSeconds(le)), ":zero": avN(0)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.rcc(),
	})
	if err == nil {
		s.report("extend", "UpdateItem", out.ConsumedCapacity)
		return nil
	}
	return s.lockLost("extend", "UpdateItem", "extending lease", err)
}
