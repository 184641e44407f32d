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

// response is an encoded response as the record item holds it: inline, or
// named by its chunk set.
type response struct {
	blob    []byte
	version string // "" when inline
	chunks  int
}

// prepare encodes resp and, when it is larger than an item should hold,
// writes its chunks (before the record that names them).
func (s *Store) prepare(ctx context.Context, key, writer string, resp *cache.Response, expMs int64) (response, error) {
	blob, err := cache.EncodeResponse(resp)
	if err != nil {
		return response{}, err
	}
	if len(blob) > s.opts.MaxResponse {
		return response{}, fmt.Errorf("%w: the encoded response has %d bytes; the DynamoDB store keeps at most %d", cache.ErrFull, len(blob), s.opts.MaxResponse)
	}
	r := response{blob: blob}
	if len(blob) > s.opts.InlineLimit {
		r.version = chunkVersion(writer, blob)
		r.chunks = (len(blob) + ChunkSize - 1) / ChunkSize
		if err := s.writeChunks(ctx, key, r.version, blob, expMs); err != nil {
			return response{}, err
		}
	}
	return r, nil
}

// discard deletes the chunks of a response that was not stored.
func (s *Store) discard(ctx context.Context, key string, r response) {
	if r.version != "" {
		s.deleteChunks(ctx, key, r.version, r.chunks)
	}
}

// set adds the response's attributes to an item.
func (r response) set(it map[string]types.AttributeValue) {
	if r.version == "" {
		it[attrResponse] = avB(r.blob)
		return
	}
	it[attrChunks] = avN(int64(r.chunks))
	it[attrVersion] = avS(r.version)
	it[attrSize] = avN(int64(len(r.blob)))
}

// update is the SET and REMOVE clauses that write the response into an
// existing item, with their values.
func (r response) update(values map[string]types.AttributeValue) (set, remove string) {
	if r.version == "" {
		values[":rsp"] = avB(r.blob)
		return "#rsp = :rsp", "#nch, #cv, #rsz"
	}
	values[":nch"] = avN(int64(r.chunks))
	values[":cv"] = avS(r.version)
	values[":rsz"] = avN(int64(len(r.blob)))
	return "#nch = :nch, #cv = :cv, #rsz = :rsz", "#rsp"
}

// Complete implements cache.Store: one conditional UpdateItem over the
// caller's claim; on a key found free (the claim lapsed and nobody claimed it),
// a second, conditional PutItem stores the record there.
func (s *Store) Complete(ctx context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	if rec == nil || rec.Response == nil {
		return errors.New("dynamostore: completing without a response")
	}
	if token == "" {
		return cache.ErrClaimLost
	}
	if err := checkKey(key); err != nil {
		return err
	}
	now := s.now()
	exp := ms(now) + durMs(ttl)
	r, err := s.prepare(ctx, key, token, rec.Response, exp)
	if err != nil {
		return err
	}
	err = s.complete(ctx, key, token, rec, r, now, exp)
	if errors.Is(err, cache.ErrClaimLost) {
		s.discard(ctx, key, r)
	}
	if err == nil {
		s.waiters.Notify(key)
	}
	return err
}

func (s *Store) complete(ctx context.Context, key, token string, rec *cache.Record, r response, now time.Time, exp int64) error {
	created := rec.CreatedAt
	if created.IsZero() {
		created = now
	}
	values := map[string]types.AttributeValue{
		":one": avN(stateInFlight), ":two": avN(stateCompleted), ":tok": avB([]byte(token)),
		":ex": avN(exp), ":ttl": avN(ttlSeconds(exp)), ":unk": avBool(rec.Response.Unknown), ":ca": avN(ms(created)),
	}
	set := "#st = :two, #tok = :tok, #ex = :ex, #ttl = :ttl, #unk = :unk, #ca = if_not_exists(#ca, :ca)"
	if rec.Fingerprint != "" {
		values[":fp"] = avB([]byte(rec.Fingerprint))
		set += ", #fp = if_not_exists(#fp, :fp)"
	}
	rset, rremove := r.update(values)
	update := "SET " + set + ", " + rset + " REMOVE #tr, #in, #op, #le, #hd, #hs, #lf, " + rremove
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 itemKey(key, recordSK),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(condComplete),
		ExpressionAttributeNames:            names(update, condComplete),
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.rcc(),
	})
	if err == nil {
		s.report("complete", "UpdateItem", out.ConsumedCapacity)
		return nil
	}
	old, err := s.refused(ctx, "complete", "UpdateItem", "completing", key, err, nil)
	if err != nil {
		return err
	}
	if done, err := s.settledBy(ctx, key, old, token, now, r); done {
		return err
	}
	// The key is free: a lapsed record or a tombstone is there. Store the
	// record over it, as a claim would, unless someone claims first.
	it := itemKey(key, recordSK)
	it[attrState] = avN(stateCompleted)
	it[attrToken] = avB([]byte(token))
	if rec.Fingerprint != "" {
		it[attrFP] = avB([]byte(rec.Fingerprint))
	}
	it[attrCreated] = avN(ms(created))
	it[attrExpires] = avN(exp)
	it[attrTTL] = avN(ttlSeconds(exp))
	it[attrUnknown] = avBool(rec.Response.Unknown)
	r.set(it)
	for try := 0; try < claimTries; try++ {
		out, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           aws.String(s.table),
			Item:                                it,
			ConditionExpression:                 aws.String(condCompleteFree),
			ExpressionAttributeNames:            names(condCompleteFree),
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now": avN(ms(now))},
			ReturnValues:                        types.ReturnValueAllOld,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			ReturnConsumedCapacity:              s.rcc(),
		})
		if err == nil {
			s.report("complete", "PutItem", out.ConsumedCapacity)
			s.dropChunksOf(ctx, key, out.Attributes, r.version)
			return nil
		}
		old, err := s.refused(ctx, "complete", "PutItem", "completing on a free key", key, err, it)
		if err != nil {
			return err
		}
		if done, err := s.settledBy(ctx, key, old, token, now, r); done {
			return err
		}
	}
	return errors.New("dynamostore: completing: the record kept changing under the write")
}

// settledBy reports whether a Complete that found old is over, and how: old is
// the record token completed (a re-sent Complete, or one after a Resolve: the
// record stands, nothing is written, and chunks this call wrote anew are not
// its own), or another live claim or record holds the key (ErrClaimLost). When
// it is not over, the key is free.
func (s *Store) settledBy(ctx context.Context, key string, old item, token string, now time.Time, r response) (bool, error) {
	switch {
	case old.completedBy(token, now):
		s.dropUnused(ctx, key, old, r)
		return true, nil
	case old.live(now):
		return true, cache.ErrClaimLost
	}
	return false, nil
}
