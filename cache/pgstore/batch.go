package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultBatches is how many batches a Store keeps in flight at once.
const DefaultBatches = 4

// maxBatch bounds the statements one batch carries.
const maxBatch = 64

// batcher sends the request path's statements (claim, complete, release,
// extend) from concurrent requests together: each worker takes the first
// statement waiting and every other one already waiting (up to maxBatch), and
// sends them as one pgx batch. A batch is one round trip and one implicit
// transaction, so one commit (one WAL flush) for all of them instead of one
// each; it is durable as configured when it answers, like a statement alone.
// Statements are sorted by key, so two batches lock rows in the same order and
// cannot deadlock each other. Should any statement fail, the transaction is
// rolled back and every statement of the batch runs again on its own: each is
// idempotent for its token. A statement alone (no other waiting) is sent as
// it was, with its caller's context.
type batcher struct {
	pool  *pgxpool.Pool
	queue chan *call
	stop  chan struct{}
	wg    sync.WaitGroup
}

type call struct {
	ctx  context.Context
	key  string
	sql  string
	args []any
	dest []any
	done chan error
}

func newBatcher(pool *pgxpool.Pool, workers int) *batcher {
	b := &batcher{pool: pool, queue: make(chan *call, maxBatch*workers), stop: make(chan struct{})}
	for i := 0; i < workers; i++ {
		b.wg.Add(1)
		go b.work()
	}
	return b
}

func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
}

// run queues one statement and scans its one row into dest.
func (b *batcher) run(ctx context.Context, key, sql string, args []any, dest ...any) error {
	c := &call{ctx: ctx, key: key, sql: sql, args: args, dest: dest, done: make(chan error, 1)}
	select {
	case b.queue <- c:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.stop:
		return errors.New("pgstore: store closed")
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *batcher) work() {
	defer b.wg.Done()
	calls := make([]*call, 0, maxBatch)
	for {
		select {
		case <-b.stop:
			return
		case c := <-b.queue:
			calls = append(calls[:0], c)
		}
	more:
		for len(calls) < maxBatch {
			select {
			case c := <-b.queue:
				calls = append(calls, c)
			default:
				break more
			}
		}
		b.send(calls)
		clear(calls)
	}
}

func (b *batcher) send(calls []*call) {
	live := calls[:0]
	for _, c := range calls { // a caller that gave up is not run on its behalf
		if err := c.ctx.Err(); err != nil {
			c.done <- err
			continue
		}
		live = append(live, c)
	}
	if len(live) == 1 {
		b.alone(live[0])
		return
	}
	if len(live) == 0 {
		return
	}
	slices.SortStableFunc(live, func(x, y *call) int { return cmp.Compare(x.key, y.key) })
	ctx, cancel := batchContext(live)
	defer cancel()
	var batch pgx.Batch
	for _, c := range live {
		batch.Queue(c.sql, c.args...)
	}
	br := b.pool.SendBatch(ctx, &batch)
	errs := make([]error, len(live))
	failed := false
	for i, c := range live {
		errs[i] = br.QueryRow().Scan(c.dest...)
		if errs[i] != nil && !errors.Is(errs[i], pgx.ErrNoRows) {
			failed = true
		}
	}
	if err := br.Close(); err != nil || failed {
		for _, c := range live { // rolled back, or the answer was lost: each again, alone
			b.alone(c)
		}
		return
	}
	for i, c := range live {
		c.done <- errs[i]
	}
}

func (b *batcher) alone(c *call) {
	c.done <- b.pool.QueryRow(c.ctx, c.sql, c.args...).Scan(c.dest...)
}

// batchContext ends at the latest of the callers' deadlines (none if one has
// none), so that no caller's statement is cut short by another's deadline.
func batchContext(calls []*call) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
