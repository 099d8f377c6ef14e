package usage

import (
	"context"
	"time"
)

// Pacer spreads a periodic flush's work over time, so that a flush does
// not take the cores the checks share with Redis and MySQL for a second or
// more (their p99 rose severalfold after each flush: make bench-analytics).
// After each step it rests (1/duty − 1) times as long as the step took,
// until the deadline (half the flush interval); then it runs flat out. It
// measures real time, not analytics' clock. A nil *Pacer never rests, nor
// does one whose hurry channel is closed (Close during a paced flush).
type Pacer struct {
	duty     float64
	deadline time.Time
	last     time.Time // end of the previous rest: the current step's start
	hurry    <-chan struct{}
	now      func() time.Time
	sleep    func(ctx context.Context, hurry <-chan struct{}, d time.Duration)
}

// NewPacer paces until deadline at duty (0 < duty < 1) or until hurry is
// closed; otherwise it returns nil, which never rests.
func NewPacer(duty float64, deadline time.Time, hurry <-chan struct{}) *Pacer {
	if duty <= 0 || duty >= 1 {
		return nil
	}
	return &Pacer{duty: duty, deadline: deadline, hurry: hurry, last: time.Now(), now: time.Now, sleep: sleepCtx}
}

// Share is a pacer for one of n flushers working at once (the shards'
// writers), each at 1/n of p's duty so that together they keep to it.
func (p *Pacer) Share(n int) *Pacer {
	if p == nil {
		return nil
	}
	q := *p
	q.duty = p.duty / float64(max(n, 1))
	q.last = q.now()
	return &q
}

// Rest ends a step: it sleeps in proportion to the step's length, never past
// the deadline, and returns early when ctx is done.
func (p *Pacer) Rest(ctx context.Context) {
	if p == nil {
		return
	}
	now := p.now()
	if left := p.deadline.Sub(now); left > 0 {
		d := time.Duration(float64(now.Sub(p.last)) * (1/p.duty - 1))
		p.sleep(ctx, p.hurry, min(d, left))
	}
	p.last = p.now()
}

// sleepCtx sleeps d, or less if ctx is done or hurry is closed.
func sleepCtx(ctx context.Context, hurry <-chan struct{}, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-hurry:
	}
}
