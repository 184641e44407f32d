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

// Resolve implements cache.Store: one conditional write on the record item
// (after the chunks of a large response).
func (s *Store) Resolve(ctx context.Context, key string, resp *cache.Response, ttl time.Duration) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if resp != nil && resp.Unknown {
		return errors.New("dynamostore: resolving with another unknown outcome")
	}
	now := s.now()
	opID := newOpID()
	values := map[string]types.AttributeValue{":now": avN(ms(now)), ":one": avN(stateInFlight), ":two": avN(stateCompleted), ":true": avBool(true), ":op": avS(opID)}
	var (
		old   map[string]types.AttributeValue
		err   error
		r     response
		cc    *types.ConsumedCapacity
		call  string
		wrote map[string]types.AttributeValue
	)
	if resp == nil {
		// Deleted as Delete does: a tombstone that a re-sent call recognises.
		call, wrote = "PutItem", s.tombstone(key, opID, now)
		var out *dynamodb.PutItemOutput
		out, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           aws.String(s.table),
			Item:                                wrote,
			ConditionExpression:                 aws.String(condResolve),
			ExpressionAttributeNames:            names(condResolve),
			ExpressionAttributeValues:           values,
			ReturnValues:                        types.ReturnValueAllOld,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			ReturnConsumedCapacity:              s.rcc(),
		})
		if err == nil {
			old, cc = out.Attributes, out.ConsumedCapacity
		}
	} else {
		exp := ms(now) + durMs(ttl)
		if r, err = s.prepare(ctx, key, "resolve:"+opID, resp, exp); err != nil {
			return err
		}
		values[":false"], values[":ex"], values[":ttl"] = avBool(false), avN(exp), avN(ttlSeconds(exp))
		rset, rremove := r.update(values)
		// A claim that lapsed becomes a completed record (keeping its
		// token, fingerprint and creation time).
		update := "SET #st = :two, #unk = :false, #ex = :ex, #ttl = :ttl, #op = :op, " + rset + " REMOVE #tr, #in, #le, #hd, #hs, #lf, " + rremove
		call = "UpdateItem"
		var out *dynamodb.UpdateItemOutput
		out, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           aws.String(s.table),
			Key:                                 itemKey(key, recordSK),
			UpdateExpression:                    aws.String(update),
			ConditionExpression:                 aws.String(condResolve),
			ExpressionAttributeNames:            names(update, condResolve),
			ExpressionAttributeValues:           values,
			ReturnValues:                        types.ReturnValueAllOld,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			ReturnConsumedCapacity:              s.rcc(),
		})
		if err == nil {
			old, cc = out.Attributes, out.ConsumedCapacity
		}
	}
	if err == nil {
		s.report("resolve", call, cc)
		s.dropChunksOf(ctx, key, old, r.version)
		s.waiters.Notify(key)
		return nil
	}
	s.discard(ctx, key, r)
	cur, err := s.refused(ctx, "resolve", call, "resolving", key, err, wrote)
	if err != nil {
		return err
	}
	if !cur.live(now) {
		return cache.ErrNotFound
	}
	return fmt.Errorf("dynamostore: resolving: %w", cache.ErrNotUnknown)
}

// Delete implements cache.Store: one conditional PutItem that leaves a
// tombstone (a record that lapsed at the epoch, kept an hour), so that a
// re-sent Delete finds its own id there and answers as the first did.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	now := s.now()
	opID := newOpID()
	tomb := s.tombstone(key, opID, now)
	out, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(s.table),
		Item:                                tomb,
		ConditionExpression:                 aws.String(condDelete),
		ExpressionAttributeNames:            names(condDelete),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": avN(ms(now)), ":op": avS(opID)},
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.rcc(),
	})
	if err == nil {
		s.report("delete", "PutItem", out.ConsumedCapacity)
		s.dropChunksOf(ctx, key, out.Attributes, "")
		s.waiters.Notify(key)
		return nil
	}
	if ccf, ok := isCCF(err); ok {
		s.reportFailed("delete", "PutItem", ccf.Item, tomb)
		return cache.ErrNotFound
	}
	return fmt.Errorf("dynamostore: deleting key: %w", err)
}

// tombstone is the item a Delete (or a nil Resolve) leaves: state 0, lapsed
// at the epoch (absent to every reader and condition, whatever its clock),
// with the writing call's id, deleted by DynamoDB's time to live.
func (s *Store) tombstone(key, opID string, now time.Time) map[string]types.AttributeValue {
	it := itemKey(key, recordSK)
	it[attrState] = avN(stateDeleted)
	it[attrExpires] = avN(0)
	it[attrTTL] = avN(ttlSeconds(ms(now) + tombstoneLife.Milliseconds()))
	it[attrOp] = avS(opID)
	return it
}
