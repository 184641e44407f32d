// Package redisstore is a cache.Store on Redis (go-redis v9), shared by every
// instance that points at the same server, Sentinel group or Cluster.
//
// Each operation is one Lua script on one key: a claim, a replay or a conflict is one
// round trip; a first execution is two (claim, complete) plus one per claim renewal.
// Records are hashes under Prefix + key; the middleware passes keys that are already
// SHA-256 hex digests, so a client's key never reaches Redis verbatim.
package redisstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idemproxy/idemproxy/cache"
	"github.com/idemproxy/idemproxy/cache/internal/localcache"
	"github.com/idemproxy/idemproxy/cache/internal/replays"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is prepended to every key.
const DefaultPrefix = "idem:"

// Store is the Redis cache.Store. The caller owns the client and closes it.
type Store struct {
	c         redis.UniversalClient
	prefix    string
	now       func() time.Time
	sub       subscriber
	pipelines int
	pipe      *pipeliner // nil: every call goes on its own

	waitReplicas int // replicas that must acknowledge each write; 0: none
	waitTimeout  time.Duration

	localBytes int64
	local      *localcache.Cache // nil: no local cache

	notifyArg any // channel(), boxed once (channelArg)

	replays *replays.Batch // the replay counts not written yet (replays.go)
}

var (
	_ cache.Store         = (*Store)(nil)
	_ cache.Notifier      = (*Store)(nil)
	_ cache.LocalCacher   = (*Store)(nil)
	_ cache.ReplayCounter = (*Store)(nil)
)

// New returns a Store over c: a *redis.Client, *redis.ClusterClient, a Sentinel
// failover client or a redis.UniversalClient. Call Close when done with it: it
// stops the store's pipeline workers and its pub/sub subscription.
//
// New does not dial: call the client's Ping to learn whether Redis answers, and
// CheckEviction to learn whether Redis may evict the store's claims.
func New(c redis.UniversalClient, opts Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s := &Store{
		c:            c,
		prefix:       cmp.Or(opts.Prefix, DefaultPrefix),
		now:          opts.Now,
		pipelines:    max(cmp.Or(opts.Pipelines, DefaultPipelines), 0), // negative: none
		waitReplicas: opts.WaitReplicas,
		waitTimeout:  cmp.Or(opts.WaitTimeout, DefaultWaitTimeout),
		localBytes:   opts.LocalCache,
	}
	s.notifyArg = s.channel()
	s.replays = replays.New(cache.ReplayFlush, replayFlushTimeout, s.writeReplays)
	switch {
	case s.waitReplicas < 0:
		return nil, fmt.Errorf("redisstore: wait replicas must not be negative, got %d", s.waitReplicas)
	case s.waitReplicas > 0 && s.waitTimeout < time.Millisecond:
		return nil, fmt.Errorf("redisstore: the wait for replicas needs a timeout of at least 1ms, got %v", s.waitTimeout)
	}
	_, cluster := c.(*redis.ClusterClient)
	switch {
	case s.localBytes < 0:
		s.localBytes = 0
	case s.localBytes == 0 && !cluster && opts.Now == nil:
		s.localBytes, _ = DefaultLocalCache()
	}
	if cluster && s.localBytes > 0 {
		return nil, errors.New("redisstore: the local cache needs one pub/sub order, which Redis Cluster does not keep across nodes: turn it off")
	}
	// In Cluster, a pipeline spreads over nodes and a keyless WAIT would go to
	// any of them: waited writes go one by one to their key's primary instead.
	if s.pipelines > 0 && !(cluster && s.waitReplicas > 0) {
		s.pipe = newPipeliner(c, s.pipelines)
		s.pipe.waitReplicas, s.pipe.waitTimeout = s.waitReplicas, s.waitTimeout
	}
	if s.local = localcache.New(s.localBytes, rand.Text()); s.local != nil {
		s.sub.mu.Lock()
		s.startSubscriber()
		s.sub.mu.Unlock()
	}
	return s, nil
}

// DefaultLocalCache is the size of the local cache Options.LocalCache 0
// means (but with Redis Cluster), and what it was taken from: a sixteenth of
// the process's memory budget (GOMEMLIMIT, else its cgroup's memory limit),
// at least 8MiB and at most 256MiB; 64MiB when there is no budget.
func DefaultLocalCache() (int64, string) { return localcache.DefaultSize() }

// LocalCacheStats implements cache.LocalCacher.
func (s *Store) LocalCacheStats() (cache.LocalCacheStats, bool) {
	if s.local == nil {
		return cache.LocalCacheStats{}, false
	}
	return s.local.Stats(), true
}

// run sends one script call, through a pipeline when the store batches.
func (s *Store) run(ctx context.Context, script *redis.Script, key string, args ...any) *redis.Cmd {
	keys := []string{s.prefix + key}
	if s.pipe == nil {
		if s.waitReplicas > 0 && script != getScript {
			return s.runWaited(ctx, script, keys, args...)
		}
		return script.Run(ctx, s.c, keys, args...)
	}
	return s.pipe.run(ctx, script, keys, args...)
}

func (s *Store) nowArg() int64 {
	if s.now == nil {
		return 0
	}
	return s.now().UnixMilli()
}

// clock is the injected clock, or the local one.
func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if m < 1 {
		m = 1
	}
	return m
}

// ReadsDeferredClaims implements cache.DeferredClaims: a claim's Info and
// Owner are read through Claim.EncodedInfo and Claim.ScopeOwner.
func (*Store) ReadsDeferredClaims() {}

// ClaimOrGet implements cache.Store in one round trip, or none when the local
// cache holds the completed record.
func (s *Store) ClaimOrGet(ctx context.Context, key string, lock cache.Claim) (*cache.Record, bool, error) {
	if lock.Token == "" {
		return nil, false, errors.New("redisstore: empty claim token")
	}
	return s.local.Claim(key, func() (*cache.Record, bool, time.Duration, error) { return s.claimOrGet(ctx, key, lock) })
}

// claimOrGet runs the claim; ttl is a found record's remaining life by the
// server's clock.
func (s *Store) claimOrGet(ctx context.Context, key string, lock cache.Claim) (*cache.Record, bool, time.Duration, error) {
	lock.Info = lock.EncodedInfo() // sent with the claim: the script decides
	res, err := s.run(ctx, lockScript, key, lock.Token, lock.Fingerprint, ms(lock.Duration), s.nowArg(), string(lock.Trace), holdArg(lock.Hold), lock.Info).Slice()
	if errors.Is(err, ErrNotReplicated) {
		// The claim is refused (nothing will run), but the primary has it: undo
		// it, so it cannot hold the key against the pending Complete of an
		// earlier execution. Not waited: the claim is gone from the primary
		// either way, and a replica that has it lets it lapse.
		_ = releaseScript.Run(context.WithoutCancel(ctx), s.c, []string{s.prefix + key}, lock.Token, s.nowArg(), s.channelArg()).Err()
	}
	if err != nil {
		return nil, false, 0, fmt.Errorf("redisstore: claiming key: %w", err)
	}
	rec, found, err := parseRecord(res)
	if err != nil || !found {
		return nil, false, 0, err
	}
	var ttl time.Duration
	if now, ok := res[len(res)-1].(int64); ok && len(res) == 8 {
		ttl = rec.ExpiresAt.Sub(time.UnixMilli(now))
	}
	return rec, true, ttl, nil
}

// Complete implements cache.Store. With a local cache, the record it stored
// is kept there (localcache: Begin before the write, End after it), so the
// first replay on this instance needs no round trip, and the write carries
// the cache's ping when one is due (localcache.Cache.Carry).
func (s *Store) Complete(ctx context.Context, key, token string, rec *cache.Record, ttl time.Duration) error {
	if rec == nil || rec.Response == nil {
		return errors.New("redisstore: completing without a response")
	}
	if token == "" {
		return cache.ErrClaimLost
	}
	blob, err := cache.EncodeResponse(rec.Response)
	if err != nil {
		return err
	}
	created := rec.CreatedAt
	if created.IsZero() {
		created = s.clock()
	}
	write := s.local.Begin(key)
	sent := s.clock()
	n, err := s.run(ctx, completeScript, key, token, blob, ms(ttl), s.nowArg(), s.channelArg(),
		rec.Fingerprint, created.UnixMilli(), boolArg(rec.Response.Unknown), s.local.Carry()).Int()
	// Kept as it was sent, encoded; only a Complete that stored it (1).
	s.local.EndEncoded(write, rec.Fingerprint, time.UnixMilli(created.UnixMilli()), time.UnixMilli(sent.Add(time.Duration(ms(ttl))*time.Millisecond).UnixMilli()),
		blob, rec.Response.Unknown || err != nil || n != 1, time.Duration(ms(ttl))*time.Millisecond)
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: completing: %w", err)
	case n != 1 && n != 2:
		return cache.ErrClaimLost
	}
	return nil
}

// holdArg is a claim's hold in milliseconds (0: none).
func holdArg(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ms(d)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Resolve implements cache.Store.
func (s *Store) Resolve(ctx context.Context, key string, resp *cache.Response, ttl time.Duration) error {
	var blob []byte
	if resp != nil {
		if resp.Unknown {
			return errors.New("redisstore: resolving with another unknown outcome")
		}
		var err error
		if blob, err = cache.EncodeResponse(resp); err != nil {
			return err
		}
	}
	n, err := s.run(ctx, resolveScript, key, blob, ms(ttl), s.nowArg(), s.channelArg()).Int()
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: resolving key: %w", err)
	case n == 1:
		if err := s.local.Forget(ctx, key); err != nil {
			return fmt.Errorf("redisstore: resolving key: %w", localcache.Unsettled(err))
		}
		return nil
	case n == 0:
		return cache.ErrNotFound
	case n == 2:
		return fmt.Errorf("redisstore: resolving key: %w", cache.ErrNotUnknown)
	}
	return fmt.Errorf("%w: the value under this key is not an idempotency record", cache.ErrCorrupt)
}

// Release implements cache.Store.
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.fenced(ctx, releaseScript, "releasing", key, token, token, s.nowArg(), s.channelArg())
}

// Extend implements cache.Store.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	return s.fenced(ctx, extendScript, "extending lease", key, token, token, ms(lease), s.nowArg())
}

// fenced runs script with token and then args as its arguments; the token
// leads args, so that the call makes no second slice of them.
func (s *Store) fenced(ctx context.Context, script *redis.Script, what, key, token string, args ...any) error {
	if token == "" {
		return cache.ErrClaimLost
	}
	n, err := s.run(ctx, script, key, args...).Int()
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", what, err)
	}
	if n != 1 {
		return cache.ErrClaimLost
	}
	return nil
}

// Get implements cache.Store.
func (s *Store) Get(ctx context.Context, key string) (*cache.Record, error) {
	res, err := s.run(ctx, getScript, key, s.nowArg()).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: reading key: %w", err)
	}
	rec, found, err := parseRecord(res)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, cache.ErrNotFound
	}
	operatorFields(res, rec)
	return rec, nil
}

// operatorFields sets rec's info and replay count from getScript's answer,
// whose last three values they are.
func operatorFields(res []any, rec *cache.Record) {
	if len(res) != 11 && len(res) != 12 {
		return
	}
	x := res[len(res)-3:]
	info, _ := x[0].(string)
	switch {
	case rec.Lapsed:
		rec.Response.Info = cache.WithEvent(info, cache.Event{Kind: cache.EventHeld, By: cache.ByLapse})
	case rec.State == cache.StateInFlight:
		rec.Info = info
	}
	if s, ok := x[1].(string); ok {
		rec.Replays, _ = strconv.ParseInt(s, 10, 64)
	}
	if s, ok := x[2].(string); ok {
		if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
			rec.LastReplay = time.UnixMilli(ms)
		}
	}
}

// Delete implements cache.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	n, err := s.run(ctx, deleteScript, key, s.nowArg(), s.channelArg()).Int()
	if err != nil {
		return fmt.Errorf("redisstore: deleting key: %w", err)
	}
	if n != 1 {
		return cache.ErrNotFound
	}
	if err := s.local.Forget(ctx, key); err != nil {
		return fmt.Errorf("redisstore: deleting key: %w", localcache.Unsettled(err))
	}
	return nil
}

// Ping implements cache.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}

// parseRecord reads a script answer: {0} absent, {-1} foreign value,
// {1, v, st, fp, ca, ex, resp} a record.
func parseRecord(res []any) (*cache.Record, bool, error) {
	if len(res) == 0 {
		return nil, false, fmt.Errorf("%w: empty script answer", cache.ErrCorrupt)
	}
	code, ok := res[0].(int64)
	switch {
	case !ok:
		return nil, false, fmt.Errorf("%w: script answer %T", cache.ErrCorrupt, res[0])
	case code == 0:
		return nil, false, nil
	case code == -1:
		return nil, false, fmt.Errorf("%w: the value under this key is not an idempotency record", cache.ErrCorrupt)
	case code == 2 && len(res) >= 9:
		return parseLapsed(res)
	case code != 1 || len(res) < 6:
		return nil, false, fmt.Errorf("%w: script answer %v", cache.ErrCorrupt, res)
	}
	str := func(i int) string {
		if i < len(res) {
			if s, ok := res[i].(string); ok {
				return s
			}
		}
		return ""
	}
	st, err := strconv.Atoi(str(2))
	if err != nil {
		return nil, false, fmt.Errorf("%w: state %q", cache.ErrCorrupt, str(2))
	}
	created, err1 := strconv.ParseInt(str(4), 10, 64)
	expires, err2 := strconv.ParseInt(str(5), 10, 64)
	if err1 != nil || err2 != nil {
		return nil, false, fmt.Errorf("%w: timestamps %q %q", cache.ErrCorrupt, str(4), str(5))
	}
	rec := &cache.Record{
		Version:     cache.FormatVersion,
		State:       cache.State(st),
		Fingerprint: str(3),
		CreatedAt:   time.UnixMilli(created),
		ExpiresAt:   time.UnixMilli(expires),
	}
	switch rec.State {
	case cache.StateInFlight:
		if t := str(6); t != "" {
			rec.Trace = []byte(t)
		}
	case cache.StateCompleted:
		resp, err := cache.DecodeResponseString(str(6)) // no copy of the reply
		if err != nil {
			return nil, false, err
		}
		rec.Response = resp
	default:
		return nil, false, fmt.Errorf("%w: state %d", cache.ErrCorrupt, st)
	}
	return rec, true, nil
}

// parseLapsed reads the scripts' answer for a lapsed claim, held: {2, v, st,
// fp, ca, ex, trace, now, found}.
func parseLapsed(res []any) (*cache.Record, bool, error) {
	fp, _ := res[3].(string)
	trace, _ := res[6].(string)
	created, err1 := strconv.ParseInt(fmt.Sprint(res[4]), 10, 64)
	expires, err2 := strconv.ParseInt(fmt.Sprint(res[5]), 10, 64)
	found, _ := res[8].(int64)
	if err1 != nil || err2 != nil {
		return nil, false, fmt.Errorf("%w: timestamps %v %v", cache.ErrCorrupt, res[4], res[5])
	}
	var tr []byte
	if trace != "" {
		tr = []byte(trace)
	}
	return cache.LapsedRecord(fp, time.UnixMilli(created), time.UnixMilli(expires), tr, "", found == 1), true, nil
}
