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
type Coalescer struct {
	next     BatchChecker
	queue    chan *pending
	maxBatch int
	pool     sync.Pool
	wg       sync.WaitGroup
}

// New starts workers batch senders (each keeps one batch in flight) with at
// most maxBatch checks per batch.
func New(next BatchChecker, workers, maxBatch int) *Coalescer {
	if workers < 1 {
		workers = 1
	}
	if maxBatch < 1 {
		maxBatch = 1
	}
	c := &Coalescer{next: next, queue: make(chan *pending, workers*maxBatch), maxBatch: maxBatch}
	c.pool.New = func() any { return &pending{done: make(chan result, 1)} }
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

// Close stops the workers once the queued checks are answered.
func (c *Coalescer) Close() {
	close(c.queue)
	c.wg.Wait()
}

func (c *Coalescer) work() {
	defer c.wg.Done()
	batch := make([]*pending, 0, c.maxBatch)
	reqs := make([]*limiter.Request, 0, c.maxBatch)
	// Each caller is answered as soon as its own check is decided, not
	// when the batch is: a check the hot tier decides alone does not wait
	// for another's MySQL transaction. One func for the worker's life (it
	// reads batch as it is when called), not one per batch or request.
	deliver := func(i int, d limiter.Decision, err error) {
		batch[i].done <- result{d: d, err: err}
	}
	for first := range c.queue {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < c.maxBatch {
			select {
			case p, ok := <-c.queue:
				if !ok {
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		reqs = reqs[:0]
		for _, p := range batch {
			reqs = append(reqs, p.req)
		}
		// The batch is not tied to any one caller's context: one client
		// hanging up must not fail the others. Store timeouts bound it.
		c.next.CheckBatchEach(context.Background(), reqs, deliver)
	}
}
