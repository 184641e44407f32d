package dynamostore

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache"
)

// LockOrGet implements cache.Store: one conditional PutItem, which either
// claims the key or fails and brings the live record back with it.
func (s *Store) LockOrGet(ctx context.Context, key string, lock cache.Lock) (*cache.Record, bool, error) {
	if lock.Token == "" {
		return nil, false, errors.New("dynamostore: empty lock token")
	}
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	for try := 0; try < claimTries; try++ {
		now := s.now()
		exp := ms(now) + durMs(lock.Lease)
		it := itemKey(key, recordSK)
		it[attrState] = avN(stateInFlight)
		it[attrToken] = avB([]byte(lock.Token))
		if lock.Fingerprint != "" {
			it[attrFP] = avB([]byte(lock.Fingerprint))
		}
		it[attrCreated] = avN(ms(now))
		it[attrExpires] = avN(exp)
		it[attrTTL] = avN(ttlSeconds(exp))
		if len(lock.Trace) > 0 {
			it[attrTrace] = avB(lock.Trace)
		}
		out, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           aws.String(s.table),
			Item:                                it,
			ConditionExpression:                 aws.String(condClaim),
			ExpressionAttributeNames:            names(condClaim),
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now": avN(ms(now)), ":one": avN(stateInFlight), ":tok": avB([]byte(lock.Token))},
			ReturnValues:                        types.ReturnValueAllOld,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			ReturnConsumedCapacity:              s.rcc(),
		})
		if err == nil {
			s.report("claim", "PutItem", out.ConsumedCapacity)
			s.dropChunksOf(ctx, key, out.Attributes, "") // a lapsed record's
			return nil, false, nil
		}
		old, err := s.refused(ctx, "claim", "PutItem", "claiming key", key, err, it)
		if err != nil {
			return nil, false, err
		}
		if !old.live(now) || old.state() == stateInFlight && old.token() == lock.Token {
			continue // read apart from the write (fallback), and the key is free or ours: claim again
		}
		rec, err := s.load(ctx, key, old)
		if errors.Is(err, errChunkMissing) {
			continue // replaced or deleted while read
		}
		if err != nil {
			return nil, false, err
		}
		return rec, true, nil
	}
	return nil, false, errors.New("dynamostore: claiming key: the record kept changing under the claim")
}
