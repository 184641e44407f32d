package redisstore

// Reconcile jobs (cache.Reconciler): three keys with one hash tag, so every
// script reaches all of them on one Cluster node: a hash of encoded jobs by
// store key, a sorted set of store keys by due time (milliseconds), and a hash
// of the claims' tokens. Jobs are few (one per held unknown outcome of a route
// that reconciles), and each is deleted when it settles or its hold ends. The
// keys expire with the last hold they serve, so jobs left by a configuration
// that no longer reconciles (no worker to drop them) do not stay for ever.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemproxy/idemproxy/cache"
)

var _ cache.Reconciler = (*Store)(nil)

// jobKeys are the reconcile keys: jobs, due, claims.
func (s *Store) jobKeys() []string {
	p := s.prefix + "{reconcile}"
	return []string{p + "jobs", p + "due", p + "claims"}
}

// scheduleJobScript: ARGV key, job, due, how long the job may live (ms).
var scheduleJobScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local live = tonumber(ARGV[4])
for i = 1, 3 do
  local ttl = redis.call('PTTL', KEYS[i])
  if ttl ~= -2 and ttl < live then redis.call('PEXPIRE', KEYS[i], live) end
end
return 1`)

// claimJobScript takes the member due first, skipping (and dropping) members
// whose job is gone: ARGV now, token, the claim's end.
var claimJobScript = redis.NewScript(`
for i = 1, 16 do
  local m = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, 1)
  if #m == 0 then return false end
  local k = m[1]
  local job = redis.call('HGET', KEYS[1], k)
  if job then
    redis.call('ZADD', KEYS[2], ARGV[3], k)
    redis.call('HSET', KEYS[3], k, ARGV[2])
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
    return {k, job}
  end
  redis.call('ZREM', KEYS[2], k)
  redis.call('HDEL', KEYS[3], k)
end
return false`)

var updateJobScript = redis.NewScript(`
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1`)

var finishJobScript = redis.NewScript(`
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1`)

// ScheduleReconcile implements cache.Reconciler.
func (s *Store) ScheduleReconcile(ctx context.Context, key string, job *cache.Job) error {
	b, err := cache.EncodeJob(job)
	if err != nil {
		return err
	}
	live := ms(max(time.Until(job.Until), 0) + time.Hour) // past the hold, whatever the clocks
	if err := scheduleJobScript.Run(ctx, s.c, s.jobKeys(), key, b, job.Due.UnixMilli(), live).Err(); err != nil {
		return fmt.Errorf("redisstore: scheduling reconcile: %w", err)
	}
	return nil
}

// ClaimReconcile implements cache.Reconciler.
func (s *Store) ClaimReconcile(ctx context.Context, now time.Time, token string, lease time.Duration) (string, *cache.Job, error) {
	if token == "" {
		return "", nil, errors.New("redisstore: empty reconcile token")
	}
	res, err := claimJobScript.Run(ctx, s.c, s.jobKeys(), now.UnixMilli(), token, now.Add(lease).UnixMilli()).Slice()
	if errors.Is(err, redis.Nil) {
		return "", nil, cache.ErrNotFound
	}
	if err != nil {
		return "", nil, fmt.Errorf("redisstore: claiming reconcile: %w", err)
	}
	key, _ := res[0].(string)
	blob, _ := res[1].(string)
	job, err := cache.DecodeJob([]byte(blob))
	if err != nil {
		// Never readable: drop it, or it would come back forever.
		_ = finishJobScript.Run(ctx, s.c, s.jobKeys(), key, token).Err()
		return "", nil, err
	}
	return key, job, nil
}

// UpdateReconcile implements cache.Reconciler.
func (s *Store) UpdateReconcile(ctx context.Context, key, token string, job *cache.Job) error {
	b, err := cache.EncodeJob(job)
	if err != nil {
		return err
	}
	return s.fencedJob(ctx, updateJobScript, "updating", key, token, b, job.Due.UnixMilli())
}

// FinishReconcile implements cache.Reconciler.
func (s *Store) FinishReconcile(ctx context.Context, key, token string) error {
	return s.fencedJob(ctx, finishJobScript, "finishing", key, token)
}

func (s *Store) fencedJob(ctx context.Context, script *redis.Script, what, key, token string, args ...any) error {
	n, err := script.Run(ctx, s.c, s.jobKeys(), append([]any{key, token}, args...)...).Int()
	if err != nil {
		return fmt.Errorf("redisstore: %s reconcile job: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("redisstore: %s reconcile job: %w", what, cache.ErrClaimLost)
	}
	return nil
}

// GetReconcile implements cache.Reconciler.
func (s *Store) GetReconcile(ctx context.Context, key string) (*cache.Job, error) {
	b, err := s.c.HGet(ctx, s.jobKeys()[0], key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, cache.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: reading reconcile job: %w", err)
	}
	return cache.DecodeJob(b)
}
