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

// ReadsDeferredClaims implements cache.DeferredClaims: a claim's Info and
// Owner are read through Claim.EncodedInfo and Claim.ScopeOwner.
func (*Store) ReadsDeferredClaims() {}

// ClaimOrGet implements cache.Store: one conditional PutItem, which either
// claims the key or fails and brings the live record back with it.
func (s *Store) ClaimOrGet(ctx context.Context, key string, lock cache.Claim) (*cache.Record, bool, error) {
	if lock.Token == "" {
		return nil, false, errors.New("dynamostore: empty claim token")
	}
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	lock.Info = lock.EncodedInfo() // sent with the claim: the condition decides
	for try := 0; try < claimTries; try++ {
		now := s.now()
		le := ms(now) + durMs(lock.Duration)
		exp := le + holdMs(lock.Hold)
		it := itemKey(key, recordSK)
		it[attrState] = avN(stateInFlight)
		it[attrToken] = avB([]byte(lock.Token))
		if lock.Fingerprint != "" {
			it[attrFP] = avB([]byte(lock.Fingerprint))
		}
		it[attrCreated] = avN(ms(now))
		it[attrExpires] = avN(exp)
		it[attrLease] = avN(le)
		if lock.Hold > 0 {
			it[attrHoldMs] = avN(holdMs(lock.Hold))
			it[attrHoldS] = avN(ttlSeconds(exp) - le/1000)
		}
		it[attrTTL] = avN(ttlSeconds(exp))
		if len(lock.Trace) > 0 {
			it[attrTrace] = avB(lock.Trace)
		}
		if lock.Info != "" {
			it[attrInfo] = avB([]byte(lock.Info))
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
		if old.lapsed(now) {
			if rec, done, err := s.find(ctx, key, lock, old, now); done || err != nil {
				return rec, err == nil, err
			}
			continue // settled meanwhile: look again
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

// holdMs is a claim's hold in milliseconds (0: none).
func holdMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return durMs(d)
}

// find answers a claim that found old, a claim that lapsed: held. The
// first claim of the same request (its fingerprint) to find it marks it found
// with its token, in one conditional UpdateItem; done is false when the mark
// found the item changed (settled meanwhile).
func (s *Store) find(ctx context.Context, key string, lock cache.Claim, old item, now time.Time) (*cache.Record, bool, error) {
	if _, marked := old[attrFound]; marked || string(old.b(attrFP)) != lock.Fingerprint {
		return old.lapsedRecord(lock.Token), true, nil
	}
	const update = "SET #lf = :tok"
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      itemKey(key, recordSK),
		UpdateExpression:         aws.String(update),
		ConditionExpression:      aws.String(condFind),
		ExpressionAttributeNames: names(update, condFind),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": avN(ms(now)), ":one": avN(stateInFlight),
			":old": avB(old.b(attrToken)), ":tok": avB([]byte(lock.Token))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureNone,
		ReturnConsumedCapacity:              s.rcc(),
	})
	if err == nil {
		s.report("claim", "UpdateItem", out.ConsumedCapacity)
		old[attrFound] = avB([]byte(lock.Token))
		return old.lapsedRecord(lock.Token), true, nil
	}
	if _, ok := isCCF(err); ok {
		s.reportFailed("claim", "UpdateItem", nil, nil)
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("dynamostore: claiming key: %w", err)
}
