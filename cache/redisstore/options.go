package redisstore

import "time"

// DefaultWaitTimeout is how long a write waits for Options.WaitReplicas.
const DefaultWaitTimeout = 250 * time.Millisecond

// Options configure a Store. The zero value is usable: defaults apply to
// zero fields.
type Options struct {
	// Prefix is put in front of every key. "" means DefaultPrefix.
	Prefix string
	// Pipelines is how many pipelines the store keeps in flight: script
	// calls from concurrent requests are sent together, one pipeline each,
	// so a burst costs one write and one read on a connection instead of one
	// per request. Negative sends every call on its own. 0 means
	// DefaultPipelines.
	Pipelines int
	// LocalCache keeps up to this many bytes of completed records in this
	// process's memory, so a replay is answered without a round trip.
	// Deletes and resolves through any instance reach every instance's
	// cache before it answers again (how: cache/internal/localcache).
	// Negative keeps none. 0 means the default, DefaultLocalCache: a share
	// of the process's memory budget, and none with Redis Cluster (whose
	// pub/sub does not keep one order across nodes: a size is refused) or
	// with Now set (the cache's expiry runs on real time).
	LocalCache int64
	// WaitReplicas makes every write wait until this many replicas
	// acknowledged it (see ErrNotReplicated); 0 waits for none.
	WaitReplicas int
	// WaitTimeout bounds that wait; at least 1ms (WAIT 0 would block
	// forever). 0 means DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Now makes the store use this clock instead of the Redis server's TIME
	// for lease and record expiry (tests). Every process sharing the store
	// must agree on time, so production code leaves the server's clock in
	// charge. nil: the server's.
	Now func() time.Time
}
