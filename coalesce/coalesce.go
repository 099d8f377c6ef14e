// Package coalesce gathers checks that arrive at the same time into one
// batch, so that N concurrent checks cost one Redis pipeline (one write, one
// read, one wake-up of Redis) instead of N round trips. It adds no waiting:
// a worker takes whatever is queued when it becomes free, so under light
// load every check still goes alone and at once.
package coalesce

import (
	"context"
	"sync"

	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/tiers"
)

// BatchChecker decides requests in order, each as if sent alone, and hands
// each answer over as soon as it is decided (limiter.Limiter.CheckBatchEach):
// deliver is called once per request, from the calling goroutine.
type BatchChecker interface {
	CheckBatchEach(ctx context.Context, reqs []*limiter.Request, deliver func(i int, d limiter.Decision, err error))
}

type result struct {
	d   limiter.Decision
	err error
}

type pending struct {
	req  *limiter.Request
	done chan result
}

// Coalescer hands checks to a few workers, each of which sends everything
// queued in one batch.
//
// A batch with cold checks can take milliseconds (their MySQL
// transactions), while its hot checks are answered within a fraction of
// one. The store says when a batch's quick answers are out and only its
// slow parts are left (tiers.WithSlowPart); at that moment, if fewer than
// Background batches are already finishing on their own, the worker stays
// with the batch as its finisher and a new worker takes its place in the
// queue, so hot checks do not queue behind other batches' cold
// transactions. The batch goes on in order as before; only the queue is
// served by another goroutine. A batch with nothing slow (every check hot)
// costs no goroutine.
type Coalescer struct {
	next       BatchChecker
	queue      chan *pending
	maxBatch   int
	background chan struct{} // a slot per batch finishing on its own
	pool       sync.Pool
	runs       sync.Pool
	wg         sync.WaitGroup // workers, and the batches they stayed with
}

// DefaultBackground is the suggested number of batches per worker that
// may finish on their own (quotad's).
const DefaultBackground = 4

// New starts workers batch senders with at most maxBatch checks per batch;
// a worker always stays with its batch.
func New(next BatchChecker, workers, maxBatch int) *Coalescer {
	return NewWithHandOff(next, workers, maxBatch, 0)
}

// NewWithHandOff is New with up to background batches at a time left to
// finish on their own once only their slow parts are left (0: a worker
// always stays with its batch and serves the queue again after it).
func NewWithHandOff(next BatchChecker, workers, maxBatch, background int) *Coalescer {
	if workers < 1 {
		workers = 1
	}
	if maxBatch < 1 {
		maxBatch = 1
	}
	c := &Coalescer{next: next, queue: make(chan *pending, workers*maxBatch), maxBatch: maxBatch,
		background: make(chan struct{}, max(0, background))}
	c.pool.New = func() any { return &pending{done: make(chan result, 1)} }
	c.runs.New = func() any { return newRun(c) }
	c.wg.Add(workers)
	for i := 0; i < workers; i++ {
		go c.work()
	}
	return c
}

// Check decides req together with whatever other checks are waiting.
func (c *Coalescer) Check(ctx context.Context, req *limiter.Request) (limiter.Decision, error) {
	p := c.pool.Get().(*pending)
	p.req = req
	select {
	case c.queue <- p:
	case <-ctx.Done():
		c.pool.Put(p)
		return limiter.Decision{}, ctx.Err()
	}
	// Wait for the answer even if ctx ends: the check may already be
	// counted, and p must not be reused before its result is read.
	r := <-p.done
	p.req = nil
	c.pool.Put(p)
	return r.d, r.err
}

// Close stops the workers once the queued checks are answered, and waits
// for the batches finishing on their own.
func (c *Coalescer) Close() {
	close(c.queue)
	c.wg.Wait()
}

// run is one batch on its way, reused across batches.
type run struct {
	c       *Coalescer
	batch   []*pending
	reqs    []*limiter.Request
	ctx     context.Context // carries slow; one for the run's life
	handed  bool            // slow gave the worker's place to a new worker
	deliver func(i int, d limiter.Decision, err error)
}

func newRun(c *Coalescer) *run {
	r := &run{c: c, batch: make([]*pending, 0, c.maxBatch), reqs: make([]*limiter.Request, 0, c.maxBatch)}
	// The batch is not tied to any one caller's context: one client
	// hanging up must not fail the others. Store timeouts bound it.
	r.ctx = tiers.WithSlowPart(context.Background(), r.slow)
	// Each caller is answered as soon as its own check is decided, not
	// when the batch is: a check the hot tier decides alone does not wait
	// for another's MySQL transaction. One func for the run's life.
	r.deliver = func(i int, d limiter.Decision, err error) {
		r.batch[i].done <- result{d: d, err: err}
	}
	return r
}

// slow is called by the store, on the worker's goroutine, when only the
// batch's slow parts are left: if a background slot is free, a new worker
// takes over the queue and this goroutine stays to finish the batch.
func (r *run) slow() {
	if r.handed {
		return
	}
	select {
	case r.c.background <- struct{}{}:
		r.handed = true
		r.c.wg.Add(1) // before this worker's Done: Close cannot have seen 0
		go r.c.work()
	default: // enough batches finishing on their own: stay in the queue
	}
}

func (c *Coalescer) recycle(r *run) {
	clear(r.batch)
	clear(r.reqs)
	r.batch, r.reqs, r.handed = r.batch[:0], r.reqs[:0], false
	c.runs.Put(r)
}

// work serves the queue, a batch at a time, until the queue is closed or
// it stays with a batch that another worker took its place for.
func (c *Coalescer) work() {
	defer c.wg.Done()
	for first := range c.queue {
		r := c.runs.Get().(*run)
		r.batch = append(r.batch, first)
	fill:
		for len(r.batch) < c.maxBatch {
			select {
			case p, ok := <-c.queue:
				if !ok {
					break fill
				}
				r.batch = append(r.batch, p)
			default:
				break fill
			}
		}
		for _, p := range r.batch {
			r.reqs = append(r.reqs, p.req)
		}
		c.next.CheckBatchEach(r.ctx, r.reqs, r.deliver)
		handed := r.handed
		c.recycle(r)
		if handed {
			<-c.background
			return
		}
	}
}
