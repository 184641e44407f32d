package dynamostore

// Reconcile jobs (cache.Reconciler), in the records' table as it is: no index
// to add. Each job is two items, moved together by TransactWriteItems:
//
//	the job       pk the store key, sk "j": the encoded job (job), the
//	              version of its last write (jv), the sort key of its
//	              schedule entry (ssk), the claim's token (jtk, while claimed)
//	its schedule  pk "idemproxy:reconcile", sk "<due, Unix ms, 16 digits>#<jv>":
//	entry         the store key (k)
//
// The schedule entries share one partition, in due order, so a strongly
// consistent Query of the entries due at now finds the job due first. Every
// write of a job gives it a new version, puts a new entry and deletes the old
// one in one transaction, conditioned on the version it read: of two writers
// one wins, and the other reads again. A claim moves the entry to now+lease and
// sets the token, so a claimer that dies lets the job come back when its claim
// lapses; updating and finishing are conditioned on the token. Finishing
// leaves a tombstone naming the token that finished (for an hour), so a call
// the SDK re-sent after its reply was lost answers as the first did; a
// re-sent write is also recognised by the version it set. Entries whose job
// is gone (deleted by DynamoDB's time to live first) are deleted by the claim
// that finds them. Jobs and entries live until the hold's end plus an hour
// (their ttl), also when no instance reconciles any more.

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

var _ cache.Reconciler = (*Store)(nil)

// The job items' attributes, and the schedule's.
const (
	jobSK            = "j"   // the job item's sort key
	attrJob          = "job" // B: the encoded cache.Job
	attrJobVersion   = "jv"  // S: the version of the job item's last write
	attrScheduleSK   = "ssk" // S: the sort key of the job's schedule entry
	attrClaim        = "jtk" // B: the claim's token, while claimed
	attrFinishedBy   = "fin" // B: the token that finished the job (a tombstone)
	attrScheduledKey = "k"   // S: a schedule entry's store key

	// schedulePK is the schedule's partition: no store key the middleware
	// makes (64 hex digits), and its sort keys (digits) are no record's.
	schedulePK = "idemproxy:reconcile"
	// jobGrace keeps a job and its entry past the hold's end.
	jobGrace = time.Hour
	// claimCandidates is how many due entries a claim reads: claimers that
	// lose the race for the first try the next.
	claimCandidates = 10
)

// errTaken: a candidate job changed between the read and the claim (another
// instance claimed it, or it was rescheduled or finished).
var errTaken = errors.New("dynamostore: reconcile job taken")

// dueSK is a schedule entry's sort key: its due time, so entries sort by it,
// and the version of the job write that put it, so no two are the same.
func dueSK(due time.Time, version string) string {
	return fmt.Sprintf("%016d#%s", min(max(ms(due), 0), 9999999999999999), version)
}

// dueBefore is the bound below which entries are due at now.
func dueBefore(now time.Time) string {
	return fmt.Sprintf("%016d", min(max(ms(now)+1, 0), 9999999999999999))
}

func scheduleEntry(s *Store, sk, key string, ttl types.AttributeValue) types.TransactWriteItem {
	it := itemKey(schedulePK, sk)
	it[attrScheduledKey] = avS(key)
	it[attrTTL] = ttl
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: it}}
}

func unschedule(s *Store, sk string) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(s.table), Key: itemKey(schedulePK, sk)}}
}

// jobTTL is DynamoDB's time to live of a job whose hold ends at until.
func jobTTL(until time.Time) types.AttributeValue {
	return avN(ttlSeconds(ms(until) + jobGrace.Milliseconds()))
}

// ScheduleReconcile implements cache.Reconciler: the job item written over
// any job (and claim) there, its entry in the schedule, the old entry gone.
func (s *Store) ScheduleReconcile(ctx context.Context, key string, job *cache.Job) error {
	if err := checkKey(key); err != nil {
		return err
	}
	b, err := cache.EncodeJob(job)
	if err != nil {
		return err
	}
	ttl := jobTTL(job.Until)
	for try := 0; try < claimTries; try++ {
		old, err := s.getJob(ctx, "reconcile-schedule", key)
		if err != nil {
			return fmt.Errorf("dynamostore: scheduling reconcile: %w", err)
		}
		v := newOpID()
		sk := dueSK(job.Due, v)
		it := itemKey(key, jobSK)
		it[attrJob], it[attrJobVersion], it[attrScheduleSK], it[attrTTL] = avB(b), avS(v), avS(sk), ttl
		put := &types.Put{TableName: aws.String(s.table), Item: it}
		if ov, ok := old.s(attrJobVersion); ok {
			put.ConditionExpression = aws.String("#jv = :jv")
			put.ExpressionAttributeNames = names("#jv")
			put.ExpressionAttributeValues = map[string]types.AttributeValue{":jv": avS(ov)}
		} else {
			put.ConditionExpression = aws.String("attribute_not_exists(#pk)")
			put.ExpressionAttributeNames = names("#pk")
		}
		items := []types.TransactWriteItem{{Put: put}, scheduleEntry(s, sk, key, ttl)}
		if osk, ok := old.s(attrScheduleSK); ok {
			items = append(items, unschedule(s, osk))
		}
		done, err := s.transactJob(ctx, "reconcile-schedule", key, v, items)
		if err != nil {
			return fmt.Errorf("dynamostore: scheduling reconcile: %w", err)
		}
		if done {
			return nil
		}
	}
	return errors.New("dynamostore: scheduling reconcile: the job kept changing under the write")
}

// ClaimReconcile implements cache.Reconciler: a strongly consistent Query of
// the entries due at now, in due order; the first whose job it can claim (one
// transaction: the job's version and token, its entry moved to now+lease).
func (s *Store) ClaimReconcile(ctx context.Context, now time.Time, token string, lease time.Duration) (string, *cache.Job, error) {
	if token == "" {
		return "", nil, errors.New("dynamostore: empty reconcile token")
	}
	out, err := s.client.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk < :due"),
		ExpressionAttributeNames:  names("#pk #sk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": avS(schedulePK), ":due": avS(dueBefore(now))},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(claimCandidates),
		ReturnConsumedCapacity:    s.rcc(),
	})
	if err != nil {
		return "", nil, fmt.Errorf("dynamostore: claiming reconcile: %w", err)
	}
	s.report("reconcile-claim", "Query", out.ConsumedCapacity)
	for _, e := range out.Items {
		sk, _ := item(e).s(attrSK)
		key, _ := item(e).s(attrScheduledKey)
		job, err := s.claimJob(ctx, key, sk, now, token, lease)
		switch {
		case errors.Is(err, errTaken):
			continue
		case err != nil:
			return "", nil, err
		}
		return key, job, nil
	}
	return "", nil, cache.ErrNotFound
}

// claimJob claims the job under key whose schedule entry is sk.
func (s *Store) claimJob(ctx context.Context, key, sk string, now time.Time, token string, lease time.Duration) (*cache.Job, error) {
	if checkKey(key) != nil {
		s.dropEntry(ctx, sk) // not an entry this store wrote
		return nil, errTaken
	}
	cur, err := s.getJob(ctx, "reconcile-claim", key)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: claiming reconcile: %w", err)
	}
	if ssk, _ := cur.s(attrScheduleSK); ssk != sk {
		// An entry no job uses (its job expired first), or one moved
		// since the Query: its version is never put again.
		s.dropEntry(ctx, sk)
		return nil, errTaken
	}
	ov, _ := cur.s(attrJobVersion)
	ttl := cur[attrTTL]
	if ttl == nil {
		ttl = avN(ttlSeconds(ms(now) + lease.Milliseconds() + jobGrace.Milliseconds()))
	}
	v := newOpID()
	nsk := dueSK(now.Add(lease), v)
	const update = "SET #jv = :v, #ssk = :ssk, #jtk = :tok"
	items := []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:                 aws.String(s.table),
			Key:                       itemKey(key, jobSK),
			UpdateExpression:          aws.String(update),
			ConditionExpression:       aws.String("#jv = :jv"),
			ExpressionAttributeNames:  names(update, "#jv"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": avS(v), ":ssk": avS(nsk), ":tok": avB([]byte(token)), ":jv": avS(ov)},
		}},
		unschedule(s, sk),
		scheduleEntry(s, nsk, key, ttl),
	}
	done, err := s.transactJob(ctx, "reconcile-claim", key, v, items)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: claiming reconcile: %w", err)
	}
	if !done {
		return nil, errTaken
	}
	job, err := cache.DecodeJob(cur.b(attrJob))
	if err != nil {
		// Never readable: drop it, or it would come back forever.
		_ = s.FinishReconcile(ctx, key, token)
		return nil, err
	}
	return job, nil
}

// dropEntry deletes a schedule entry no job uses, for tidiness: it expires
// anyway.
func (s *Store) dropEntry(ctx context.Context, sk string) {
	out, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:              aws.String(s.table),
		Key:                    itemKey(schedulePK, sk),
		ReturnConsumedCapacity: s.rcc(),
	})
	if err == nil {
		s.report("reconcile-claim", "DeleteItem", out.ConsumedCapacity)
	}
}

// UpdateReconcile implements cache.Reconciler.
func (s *Store) UpdateReconcile(ctx context.Context, key, token string, job *cache.Job) error {
	b, err := cache.EncodeJob(job)
	if err != nil {
		return err
	}
	ttl := jobTTL(job.Until)
	return s.fencedJob(ctx, "reconcile-update", "updating", key, token, func(cur item, v string) []types.TransactWriteItem {
		nsk := dueSK(job.Due, v)
		const update = "SET #job = :job, #jv = :v, #ssk = :ssk, #ttl = :ttl REMOVE #jtk"
		return []types.TransactWriteItem{
			{Update: &types.Update{
				TableName:                aws.String(s.table),
				Key:                      itemKey(key, jobSK),
				UpdateExpression:         aws.String(update),
				ConditionExpression:      aws.String(condJobClaim),
				ExpressionAttributeNames: names(update, condJobClaim),
				ExpressionAttributeValues: map[string]types.AttributeValue{":job": avB(b), ":v": avS(v), ":ssk": avS(nsk), ":ttl": ttl,
					":jv": cur[attrJobVersion], ":tok": avB([]byte(token))},
			}},
			scheduleEntry(s, nsk, key, ttl),
		}
	})
}

// FinishReconcile implements cache.Reconciler: the job item becomes a
// tombstone naming token, and its entry is deleted.
func (s *Store) FinishReconcile(ctx context.Context, key, token string) error {
	return s.fencedJob(ctx, "reconcile-finish", "finishing", key, token, func(cur item, v string) []types.TransactWriteItem {
		it := itemKey(key, jobSK)
		it[attrFinishedBy], it[attrJobVersion] = avB([]byte(token)), avS(v)
		it[attrTTL] = avN(ttlSeconds(ms(s.now()) + tombstoneLife.Milliseconds()))
		return []types.TransactWriteItem{{Put: &types.Put{
			TableName:                 aws.String(s.table),
			Item:                      it,
			ConditionExpression:       aws.String(condJobClaim),
			ExpressionAttributeNames:  names(condJobClaim),
			ExpressionAttributeValues: map[string]types.AttributeValue{":jv": cur[attrJobVersion], ":tok": avB([]byte(token))},
		}}}
	})
}

// condJobClaim: the job is as the caller read it, and claimed by its token.
const condJobClaim = "#jv = :jv AND #jtk = :tok"

// fencedJob writes the job under key that token claims, with the items build
// makes from the job as read (cur) and the write's version (v), and the
// deletion of its old schedule entry. A job not claimed by token is
// ErrClaimLost; a job its token finished already (a call made again) is done.
func (s *Store) fencedJob(ctx context.Context, op, doing, key, token string, build func(cur item, v string) []types.TransactWriteItem) error {
	if token == "" {
		return fmt.Errorf("dynamostore: %s reconcile job: %w", doing, cache.ErrClaimLost)
	}
	if err := checkKey(key); err != nil {
		return err
	}
	for try := 0; try < claimTries; try++ {
		cur, err := s.getJob(ctx, op, key)
		if err != nil {
			return fmt.Errorf("dynamostore: %s reconcile job: %w", doing, err)
		}
		if op == "reconcile-finish" && string(cur.b(attrFinishedBy)) == token {
			return nil
		}
		if len(cur) == 0 || string(cur.b(attrClaim)) != token {
			return fmt.Errorf("dynamostore: %s reconcile job: %w", doing, cache.ErrClaimLost)
		}
		v := newOpID()
		items := build(cur, v)
		if osk, ok := cur.s(attrScheduleSK); ok {
			items = append(items, unschedule(s, osk))
		}
		done, err := s.transactJob(ctx, op, key, v, items)
		if err != nil {
			return fmt.Errorf("dynamostore: %s reconcile job: %w", doing, err)
		}
		if done {
			return nil
		}
		// Changed since the read: read again (the claim lost, or a
		// transaction that only conflicted with another).
	}
	return fmt.Errorf("dynamostore: %s reconcile job: the job kept changing under the write", doing)
}

// transactJob writes items in one transaction whose first writes the job
// under key at version v. It reports whether the write stands: done, or
// cancelled (a condition failed, or another transaction conflicted) yet the
// job holds v, because the SDK re-sent a request whose reply was lost and the
// first had been applied. A cancelled write that does not stand is
// (false, nil): the caller reads again.
func (s *Store) transactJob(ctx context.Context, op, key, v string, items []types.TransactWriteItem) (bool, error) {
	out, err := s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems:          items,
		ClientRequestToken:     aws.String(v),
		ReturnConsumedCapacity: s.rcc(),
	})
	if err == nil {
		s.reportList(op, "TransactWriteItems", out.ConsumedCapacity)
		return true, nil
	}
	var cancelled *types.TransactionCanceledException
	if !errors.As(err, &cancelled) {
		return false, err
	}
	cur, err := s.getJob(ctx, op, key)
	if err != nil {
		return false, err
	}
	got, _ := cur.s(attrJobVersion)
	return got == v, nil
}

// getJob reads the job item under key with a strongly consistent GetItem
// (nil when there is none).
func (s *Store) getJob(ctx context.Context, op, key string) (item, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:              aws.String(s.table),
		Key:                    itemKey(key, jobSK),
		ConsistentRead:         aws.Bool(true),
		ReturnConsumedCapacity: s.rcc(),
	})
	if err != nil {
		return nil, fmt.Errorf("reading the job: %w", err)
	}
	s.report(op, "GetItem", out.ConsumedCapacity)
	return item(out.Item), nil
}

// GetReconcile implements cache.Reconciler.
func (s *Store) GetReconcile(ctx context.Context, key string) (*cache.Job, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	it, err := s.getJob(ctx, "reconcile-get", key)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: reading reconcile job: %w", err)
	}
	b := it.b(attrJob)
	if b == nil {
		return nil, cache.ErrNotFound
	}
	return cache.DecodeJob(b)
}
