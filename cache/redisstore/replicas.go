package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis replicates asynchronously: a primary acknowledges a write before any
// replica has it, so a primary that dies right after acknowledging a claim can
// take the claim with it, the promoted replica has the key free, and a retry
// runs again. With Options.WaitReplicas, every write is followed, in the same
// pipeline and so the same round trip on the same connection, by
// WAIT numreplicas timeout: the call succeeds only once that many replicas
// acknowledged it. Redis's WAIT does not make Redis strongly consistent (a
// failover may still promote a replica that missed the write), but Sentinel
// promotes the replica with the most recent data, so with one replica
// acknowledging, a lost claim needs two failures.

// ErrNotReplicated: a write reached the primary, but fewer replicas than
// Options.WaitReplicas asks for acknowledged it within the timeout. The caller
// treats it as a store error (503, nothing forwarded). A refused claim is
// undone on the primary; any other write stays there, bounded by its claim or
// TTL (a Complete or Release re-sent with its token is answered as done).
var ErrNotReplicated = errors.New("write not acknowledged by enough replicas")

// wrote reports whether a script's answer means it wrote: only then must the
// write be acknowledged by replicas (a replay or a conflict writes nothing, and
// must not fail because a replica is slow).
func wrote(script *redis.Script, cmd *redis.Cmd) bool {
	if cmd.Err() != nil {
		return false
	}
	switch script {
	case lockScript:
		res, err := cmd.Slice()
		if err != nil || len(res) == 0 {
			return false
		}
		code, _ := res[0].(int64)
		return code == 0 // claimed (or re-claimed: the earlier write must be acknowledged too)
	case completeScript: // 2: stored by an earlier run, which must be acknowledged too
		n, err := cmd.Int()
		return err == nil && (n == 1 || n == 2)
	case releaseScript, extendScript, resolveScript, deleteScript:
		n, err := cmd.Int()
		return err == nil && n == 1
	}
	return false
}

// replicated turns cmd into ErrNotReplicated when it wrote and the WAIT that
// followed it counted fewer than want replicas.
func replicated(script *redis.Script, cmd *redis.Cmd, wait *redis.Cmd, want int, timeout time.Duration) *redis.Cmd {
	if !wrote(script, cmd) {
		return cmd
	}
	got, err := wait.Int()
	if err != nil {
		cmd.SetErr(fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err))
		return cmd
	}
	if got < want {
		cmd.SetErr(fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, got, want, timeout))
		return cmd
	}
	return cmd
}

// runWaited sends one script call and its WAIT as one pipeline on the
// connection that owns the key (in Cluster, the key's primary).
func (s *Store) runWaited(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	var conn redis.Cmdable = s.c
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return errCmd(ctx, err)
		}
		conn = node
	}
	return evalWaited(ctx, conn, script, keys, args, s.waitReplicas, s.waitTimeout)
}

// evalWaited runs script then WAIT in one pipeline, loading the script first
// if the server lost its script cache.
func evalWaited(ctx context.Context, conn redis.Cmdable, script *redis.Script, keys []string, args []any, want int, timeout time.Duration) *redis.Cmd {
	send := func() (cmd, wait *redis.Cmd) {
		pipe := conn.Pipeline()
		cmd = pipe.EvalSha(ctx, script.Hash(), keys, args...)
		wait = pipe.Do(ctx, "WAIT", want, timeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		return cmd, wait
	}
	cmd, wait := send()
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		if err := script.Load(ctx, conn).Err(); err != nil {
			return errCmd(ctx, err)
		}
		cmd, wait = send()
	}
	return replicated(script, cmd, wait, want, timeout)
}
