package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"regexp"

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
	// finds its own claim there: a re-sent claim.
	condClaim = "attribute_not_exists(#pk) OR #ex <= :now OR (#st = :one AND #tok = :tok AND (attribute_not_exists(#le) OR #le > :now))"
	// Complete's update writes over the caller's own claim (live, or lapsed
	// and held, or expired with nobody claiming since), or creates the record
	// on a missing key.
	condComplete = "attribute_not_exists(#pk) OR (#st = :one AND #tok = :tok)"
	// Complete's put stores the record on a key that is free otherwise (a
	// lapsed record or a tombstone is there).
	condCompleteFree = "attribute_not_exists(#pk) OR #ex <= :now"
	// Release deletes the caller's claim, or finds the key free.
	condRelease = "attribute_not_exists(#pk) OR #ex <= :now OR (#st = :one AND #tok = :tok)"
	// Extend renews the caller's claim whose claim has not lapsed.
	condExtend = "#st = :one AND #tok = :tok AND #ex > :now AND (attribute_not_exists(#le) OR #le > :now)"
	// A claim marks a claim that lapsed found, once.
	condFind = "#st = :one AND #tok = :old AND #le <= :now AND #ex > :now AND attribute_not_exists(#lf)"
	// Resolve settles a live held unknown outcome (stored, or a claim whose
	// claim lapsed), or finds what it wrote: a re-sent Resolve (its id, :op,
	// is on the item).
	condResolve = "(#ex > :now AND #st = :two AND #unk = :true) OR (#ex > :now AND #st = :one AND #le <= :now) OR #op = :op"
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

// refused is the item a conditional write found when its condition failed
// (reported, with the write's estimated cost), or the error of a write that
// failed otherwise (doing names it: "claiming key").
func (s *Store) refused(ctx context.Context, op, call, doing, key string, err error, written map[string]types.AttributeValue) (item, error) {
	ccf, ok := isCCF(err)
	if !ok {
		return nil, fmt.Errorf("dynamostore: %s: %w", doing, err)
	}
	old, err := s.existing(ctx, op, key, ccf)
	if err != nil {
		return nil, err
	}
	s.reportFailed(op, call, old, written)
	return old, nil
}

// lockLost is a claim write (release, extend) whose condition failed, reported:
// ErrClaimLost; or the error of one that failed otherwise.
func (s *Store) lockLost(op, call, doing string, err error) error {
	ccf, ok := isCCF(err)
	if !ok {
		return fmt.Errorf("dynamostore: %s: %w", doing, err)
	}
	s.reportFailed(op, call, ccf.Item, nil)
	return cache.ErrClaimLost
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
	if it.lapsed(s.now()) {
		return it.lapsedRecord(""), nil
	}
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
