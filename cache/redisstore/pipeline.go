package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPipelines is how many pipelines a Store keeps in flight at once.
const DefaultPipelines = 4

// maxBatch bounds the calls one pipeline carries.
const maxBatch = 128

// Script calls from concurrent requests are sent together: a worker takes the
// first call waiting, every other call already waiting (up to maxBatch), and
// sends them as one pipeline, so a burst of N requests costs one write and one
// read on the Redis connection rather than N of each. Nothing waits to fill a
// batch: a lone call goes out at once, alone. Each call is still exactly one
// EVALSHA on one key, so atomicity, fencing and the command counts are those of
// unbatched calls.

// call is one script invocation waiting for its pipeline.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	res    *redis.Cmd
	done   chan struct{}
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

type pipeliner struct {
	c        redis.UniversalClient
	queue    chan *call
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	waitReplicas int // see Options.WaitReplicas; one WAIT follows each pipeline
	waitTimeout  time.Duration
}

var errClosed = errors.New("redisstore: store closed")

func newPipeliner(c redis.UniversalClient, workers int) *pipeliner {
	p := &pipeliner{c: c, queue: make(chan *call, maxBatch*workers), stop: make(chan struct{})}
	for range workers {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

func (p *pipeliner) close() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// run sends one script call through a pipeline and waits for its answer or ctx.
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return errCmd(ctx, err)
	}
	cl := calls.Get().(*call)
	cl.ctx, cl.script, cl.keys, cl.args, cl.res = ctx, script, keys, args, nil
	select {
	case p.queue <- cl:
	case <-ctx.Done():
		calls.Put(cl)
		return errCmd(ctx, ctx.Err())
	case <-p.stop:
		calls.Put(cl)
		return errCmd(ctx, errClosed)
	}
	select {
	case <-cl.done:
		res := cl.res
		cl.ctx, cl.keys, cl.args, cl.res = nil, nil, nil, nil
		calls.Put(cl)
		return res
	case <-ctx.Done():
		// The worker still holds cl and will signal done into its buffer; cl
		// is not reused (the pool never sees it again).
		return errCmd(ctx, ctx.Err())
	case <-p.stop:
		return errCmd(ctx, errClosed) // as above: cl is left to the worker
	}
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

func (p *pipeliner) work() {
	defer p.wg.Done()
	batch := make([]*call, 0, maxBatch)
	cmds := make([]*redis.Cmd, 0, maxBatch)
	for {
		select {
		case cl := <-p.queue:
			batch = append(batch[:0], cl)
		case <-p.stop:
			return
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case cl := <-p.queue:
				batch = append(batch, cl)
			default:
				break fill
			}
		}
		cmds = p.send(batch, cmds[:0])
		for i, cl := range batch {
			cl.res = cmds[i]
			cl.done <- struct{}{}
			batch[i], cmds[i] = nil, nil
		}
	}
}

// send runs the batch as one pipeline (a single call goes as it is) and
// returns each call's result in order. A call whose caller has already given up
// is not sent: its caller has answered its client (503), and a claim made for it
// now would hold the key against that client's retry for a whole claim.
func (p *pipeliner) send(batch []*call, cmds []*redis.Cmd) []*redis.Cmd {
	live, last := 0, 0
	for i, cl := range batch {
		if err := cl.ctx.Err(); err != nil {
			cmds = append(cmds, errCmd(cl.ctx, err))
			continue
		}
		cmds = append(cmds, nil)
		live, last = live+1, i
	}
	switch live {
	case 0:
		return cmds
	case 1:
		cl := batch[last]
		if p.waitReplicas > 0 && cl.script != getScript {
			cmds[last] = evalWaited(cl.ctx, p.c, cl.script, cl.keys, cl.args, p.waitReplicas, p.waitTimeout)
		} else {
			cmds[last] = cl.script.Run(cl.ctx, p.c, cl.keys, cl.args...)
		}
		return cmds
	}
	ctx, cancel := batchContext(batch, cmds)
	defer cancel()
	waited := p.waitReplicas > 0 && writes(batch, cmds) // before the calls fill cmds
	pipe := p.c.Pipeline()
	for i, cl := range batch {
		if cmds[i] == nil {
			cmds[i] = pipe.EvalSha(ctx, cl.script.Hash(), cl.keys, cl.args...)
		}
	}
	// One WAIT after the batch covers every write in it: they went first on
	// the same connection.
	var wait *redis.Cmd
	if waited {
		wait = pipe.Do(ctx, "WAIT", p.waitReplicas, p.waitTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, cl := range batch {
		// NOSCRIPT: the server lost its script cache, so the script did not
		// run. Send it whole (which also caches it again). Calls left out
		// above carry their caller's context error, never this one.
		if err := cmds[i].Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			if p.waitReplicas > 0 && cl.script != getScript {
				cmds[i] = evalWaited(cl.ctx, p.c, cl.script, cl.keys, cl.args, p.waitReplicas, p.waitTimeout)
			} else {
				cmds[i] = cl.script.Eval(cl.ctx, p.c, cl.keys, cl.args...)
			}
			continue
		}
		if wait != nil {
			cmds[i] = replicated(cl.script, cmds[i], wait, p.waitReplicas, p.waitTimeout)
		}
	}
	return cmds
}

// writes reports whether any call still to be sent may write (all but Get).
func writes(batch []*call, cmds []*redis.Cmd) bool {
	for i, cl := range batch {
		if cmds[i] == nil && cl.script != getScript {
			return true
		}
	}
	return false
}

// batchContext is bounded by the latest deadline among the batch's callers (a
// caller that gives up earlier stops waiting on its own), and carries none of
// their cancellations: one caller leaving must not fail the others' commands.
// Only the calls still to be sent (a nil result so far) count.
func batchContext(batch []*call, cmds []*redis.Cmd) (context.Context, context.CancelFunc) {
	var latest time.Time
	for i, cl := range batch {
		if cmds[i] != nil {
			continue
		}
		d, ok := cl.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
