// Package coalesce gathers checks that arrive at the same time into one
// batch, so that N concurrent checks cost one Redis pipeline (one write, one
// read, one wake-up of Redis) instead of N round trips. It adds no waiting:
// a worker takes whatever is queued when it becomes free, so under light
// load every check still goes alone and at once.
package coalesce

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

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
//
// A batch with cold checks can take milliseconds (their MySQL
// transactions), while its hot checks are answered within a fraction of
// one. A worker waits for its batch at most HandOff; then, if fewer than
// Background batches are already finishing on their own, it leaves the
// rest of this one to finish on its own and takes the next batch, so hot
// checks do not queue behind other batches' cold transactions. The batch
// goes on in order as before; only the worker moves on.
type Coalescer struct {
	next       BatchChecker
	queue      chan *pending
	maxBatch   int
	handOff    time.Duration
	background chan struct{} // a slot per batch finishing on its own
	pool       sync.Pool
	runs       sync.Pool
	wg         sync.WaitGroup // workers
	bg         sync.WaitGroup // batches finishing on their own
}

// Suggested hand-off settings (quotad's with tiering on): a worker waits
// this long for its batch, and leaves at most DefaultBackground batches per
// worker to finish on their own.
const (
	DefaultHandOff    = 2 * time.Millisecond
	DefaultBackground = 4
)

// New starts workers batch senders with at most maxBatch checks per batch;
// a worker always waits for its batch (no goroutine per batch: right when
// every check is hot).
func New(next BatchChecker, workers, maxBatch int) *Coalescer {
	return NewWithHandOff(next, workers, maxBatch, 0, 0)
}

// NewWithHandOff is New with the hand-off wait and the number of batches
// that may finish on their own (handOff 0: a worker always waits for its
// batch). Handing off costs a goroutine per batch (~4 % more CPU per check
// when every check is hot), so it pays only when some checks are cold.
func NewWithHandOff(next BatchChecker, workers, maxBatch int, handOff time.Duration, background int) *Coalescer {
	if workers < 1 {
		workers = 1
	}
	if maxBatch < 1 {
		maxBatch = 1
	}
	c := &Coalescer{next: next, queue: make(chan *pending, workers*maxBatch), maxBatch: maxBatch,
		handOff: handOff, background: make(chan struct{}, max(0, background))}
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
	c.bg.Wait()
}

// The states of a run.
const (
	running  int32 = iota
	finished       // its worker is told on done
	handed         // its worker left: it cleans up after itself
)

// run is one batch on its way, reused across batches.
type run struct {
	c       *Coalescer
	batch   []*pending
	reqs    []*limiter.Request
	state   atomic.Int32
	done    chan struct{}
	deliver func(i int, d limiter.Decision, err error)
}

func newRun(c *Coalescer) *run {
	r := &run{c: c, batch: make([]*pending, 0, c.maxBatch), reqs: make([]*limiter.Request, 0, c.maxBatch),
		done: make(chan struct{}, 1)}
	// Each caller is answered as soon as its own check is decided, not
	// when the batch is: a check the hot tier decides alone does not wait
	// for another's MySQL transaction. One func for the run's life.
	r.deliver = func(i int, d limiter.Decision, err error) {
		r.batch[i].done <- result{d: d, err: err}
	}
	return r
}

// exec sends the batch, then tells its worker, or, if the worker has left,
// gives back its slot and itself.
func (r *run) exec() {
	// The batch is not tied to any one caller's context: one client
	// hanging up must not fail the others. Store timeouts bound it.
	r.c.next.CheckBatchEach(context.Background(), r.reqs, r.deliver)
	if r.state.CompareAndSwap(running, finished) {
		r.done <- struct{}{}
		return
	}
	<-r.c.background
	r.c.recycle(r)
	r.c.bg.Done()
}

func (c *Coalescer) recycle(r *run) {
	clear(r.batch)
	clear(r.reqs)
	r.batch, r.reqs = r.batch[:0], r.reqs[:0]
	c.runs.Put(r)
}

func (c *Coalescer) work() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for first := range c.queue {
		r := c.runs.Get().(*run)
		r.state.Store(running)
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
		if c.handsOff() {
			go r.exec()
		} else {
			r.exec() // no hand-off: no goroutine either
		}
		c.await(r, timer)
	}
}

// handsOff reports whether a worker may leave a slow batch to finish on
// its own (then every batch runs in a goroutine of its own).
func (c *Coalescer) handsOff() bool { return c.handOff > 0 && cap(c.background) > 0 }

// await waits for r, or hands it off after handOff when a background slot
// is free (then it returns at once).
func (c *Coalescer) await(r *run, timer *time.Timer) {
	if c.handsOff() {
		timer.Reset(c.handOff)
		select {
		case <-r.done:
			timer.Stop()
			c.recycle(r)
			return
		case <-timer.C:
		}
		select {
		case c.background <- struct{}{}:
			c.bg.Add(1)
			if r.state.CompareAndSwap(running, handed) {
				return
			}
			// It finished meanwhile: done is (or will be) sent.
			c.bg.Done()
			<-c.background
		default:
		}
	}
	<-r.done
	c.recycle(r)
}
