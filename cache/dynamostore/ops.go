package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemproxy/idemproxy/cache"
)

// Conditions. :now is the caller's clock in Unix ms; an item whose ex is not
// after it is a lapsed record, as good as absent, whatever DynamoDB's time to
// live has or has not deleted yet.
const (
	// A claim takes a free key (no item, or a lapsed record or tombstone), or
	// finds its own lock there: a re-sent claim.
	condClaim = "attribute_not_exists(#pk) OR #ex <= :now OR (#st = :one AND #tok = :tok)"
	// Complete's update writes over the caller's own lock (live, or lapsed
	// with nobody claiming since), or creates the record on a missing key.
	condComplete = "attribute_not_exists(#pk) OR (#st = :one AND #tok = :tok)"
	// Complete's put stores the record on a key that is free otherwise (a
	// lapsed record or a tombstone is there).
	condCompleteFree = "attribute_not_exists(#pk) OR #ex <= :now"
	// Release deletes the caller's lock, or finds the key free.
	condRelease = "attribute_not_exists(#pk) OR #ex <= :now OR (#st = :one AND #tok = :tok)"
	// Extend renews the caller's live lock.
	condExtend = "#st = :one AND #tok = :tok AND #ex > :now"
	// Resolve settles a live held unknown outcome, or finds what it wrote: a
	// re-sent Resolve (its id, :op, is on the item).
	condResolve = "(#ex > :now AND #st = :two AND #unk = :true) OR #op = :op"
	// Delete puts a tombstone over a live record, or finds its own tombstone.
	condDelete = "#ex > :now OR #op = :op"
)

// claimTries bounds the rounds of a claim that finds the key changing under
// it (a record that lapsed or was deleted between the write and the read).
const claimTries = 5

var placeholder = regexp.MustCompile(`#[a-z]+`)

// names maps the #name placeholders the expressions use to the attribute
// names (each placeholder is # and the attribute's name).
func names(exprs ...string) map[string]string {
	m := map[string]string{}
	for _, e := range exprs {
		for _, p := range placeholder.FindAllString(e, -1) {
			m[p] = p[1:]
		}
	}
	return m
}

func isCCF(err error) (*types.ConditionalCheckFailedException, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf, true
	}
	return nil, false
}

// existing is the item a failed conditional write found: from the failure
// itself (ReturnValuesOnConditionCheckFailure), or read with a strongly
// consistent GetItem when the server left it out.
func (s *Store) existing(ctx context.Context, op, key string, ccf *types.ConditionalCheckFailedException) (item, error) {
	if len(ccf.Item) > 0 {
		return item(ccf.Item), nil
	}
	return s.getItem(ctx, op, key)
}

func (s *Store) getItem(ctx context.Context, op, key string) (item, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:              aws.String(s.table),
		Key:                    itemKey(key, recordSK),
		ConsistentRead:         aws.Bool(true),
		ReturnConsumedCapacity: s.rcc(),
	})
	if err != nil {
		return nil, fmt.Errorf("dynamostore: %s: reading key: %w", op, err)
	}
	s.report(op, "GetItem", out.ConsumedCapacity)
	return item(out.Item), nil
}

// load decodes a live record item, reading its response's chunks when it has
// them.
func (s *Store) load(ctx context.Context, key string, it item) (*cache.Record, error) {
	rec, err := it.record()
	if err != nil || rec.State != cache.StateCompleted {
		return rec, err
	}
	blob := it.b(attrResponse)
	if v, n, size, ok := it.chunked(); ok {
		if blob, err = s.readChunks(ctx, key, v, n, size); err != nil {
			return nil, err
		}
	}
	if len(blob) == 0 {
		return nil, fmt.Errorf("%w: completed record without a response", cache.ErrCorrupt)
	}
	if rec.Response, err = cache.DecodeResponse(blob); err != nil {
		return nil, err
	}
	return rec, nil
}

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
		ccf, ok := isCCF(err)
		if !ok {
			return nil, false, fmt.Errorf("dynamostore: claiming key: %w", err)
		}
		old, err := s.existing(ctx, "claim", key, ccf)
		if err != nil {
			return nil, false, err
		}
		s.reportFailed("claim", "PutItem", old, it)
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
// caller's lock; on a key found free (the lease lapsed and nobody claimed it),
// a second, conditional PutItem stores the record there.
func (s *Store) Complete(ctx context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	if rec == nil || rec.Response == nil {
		return errors.New("dynamostore: completing without a response")
	}
	if token == "" {
		return cache.ErrLockLost
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
	if errors.Is(err, cache.ErrLockLost) {
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
	update := "SET " + set + ", " + rset + " REMOVE #tr, #op, " + rremove
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
	ccf, ok := isCCF(err)
	if !ok {
		return fmt.Errorf("dynamostore: completing: %w", err)
	}
	old, err := s.existing(ctx, "complete", key, ccf)
	if err != nil {
		return err
	}
	s.reportFailed("complete", "UpdateItem", old, nil)
	if old.completedBy(token, now) {
		// A re-sent Complete (or one after a Resolve): the record stands,
		// nothing is written; chunks this call wrote anew are not its own.
		s.dropUnused(ctx, key, old, r)
		return nil
	}
	if old.live(now) {
		return cache.ErrLockLost
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
		ccf, ok := isCCF(err)
		if !ok {
			return fmt.Errorf("dynamostore: completing on a free key: %w", err)
		}
		old, err := s.existing(ctx, "complete", key, ccf)
		if err != nil {
			return err
		}
		s.reportFailed("complete", "PutItem", old, it)
		if old.completedBy(token, now) {
			s.dropUnused(ctx, key, old, r)
			return nil
		}
		if old.live(now) {
			return cache.ErrLockLost
		}
	}
	return errors.New("dynamostore: completing: the record kept changing under the write")
}

// Release implements cache.Store: one conditional DeleteItem.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if token == "" {
		return cache.ErrLockLost
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
	ccf, ok := isCCF(err)
	if !ok {
		return fmt.Errorf("dynamostore: releasing: %w", err)
	}
	s.reportFailed("release", "DeleteItem", ccf.Item, nil)
	return cache.ErrLockLost
}

// Extend implements cache.Store: one conditional UpdateItem. A re-sent
// request carries the same :now and :ex, so it finds the lease it set and
// sets it again.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	if token == "" {
		return cache.ErrLockLost
	}
	if err := checkKey(key); err != nil {
		return err
	}
	now := s.now()
	exp := ms(now) + durMs(lease)
	const update = "SET #ex = :ex, #ttl = :ttl"
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      itemKey(key, recordSK),
		UpdateExpression:         aws.String(update),
		ConditionExpression:      aws.String(condExtend),
		ExpressionAttributeNames: names(update, condExtend),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": avN(ms(now)), ":one": avN(stateInFlight), ":tok": avB([]byte(token)),
			":ex": avN(exp), ":ttl": avN(ttlSeconds(exp))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              s.rcc(),
	})
	if err == nil {
		s.report("extend", "UpdateItem", out.ConsumedCapacity)
		return nil
	}
	ccf, ok := isCCF(err)
	if !ok {
		return fmt.Errorf("dynamostore: extending lease: %w", err)
	}
	s.reportFailed("extend", "UpdateItem", ccf.Item, nil)
	return cache.ErrLockLost
}

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
	values := map[string]types.AttributeValue{":now": avN(ms(now)), ":two": avN(stateCompleted), ":true": avBool(true), ":op": avS(opID)}
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
		update := "SET #unk = :false, #ex = :ex, #ttl = :ttl, #op = :op, " + rset + " REMOVE " + rremove
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
	ccf, ok := isCCF(err)
	if !ok {
		return fmt.Errorf("dynamostore: resolving: %w", err)
	}
	cur, err := s.existing(ctx, "resolve", key, ccf)
	if err != nil {
		return err
	}
	s.reportFailed("resolve", call, cur, wrote)
	if !cur.live(now) {
		return cache.ErrNotFound
	}
	return fmt.Errorf("dynamostore: resolving: %w", cache.ErrNotUnknown)
}

// Get implements cache.Store with a strongly consistent GetItem.
func (s *Store) Get(ctx context.Context, key string) (*cache.Record, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	for try := 0; try < claimTries; try++ {
		now := s.now()
		it, err := s.getItem(ctx, "get", key)
		if err != nil {
			return nil, err
		}
		if !it.live(now) {
			return nil, cache.ErrNotFound
		}
		rec, err := s.load(ctx, key, it)
		if errors.Is(err, errChunkMissing) {
			continue // replaced or deleted while read
		}
		return rec, err
	}
	return nil, errors.New("dynamostore: reading key: the record kept changing under the read")
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
