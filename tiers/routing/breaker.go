package routing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/tiers"
)

// ErrCircuitOpen is returned (wrapped in ErrUnavailable) while a Breaker
// refuses calls after repeated failures.
var ErrCircuitOpen = errors.New("circuit open")

// Breaker wraps a Store so that when its backend is down checks fail at
// once instead of each waiting out a timeout: after Failures consecutive
// unavailability errors — or at once on one that is a timeout — it opens
// for Cooldown, then lets one probe through at a time until one succeeds.
// It never affects decisions, only how fast an unreachable store is
// reported.
//
// By default one circuit covers the whole store. WithPartitions gives each
// part of the backend (a Redis Cluster master) a circuit of its own, so
// that one dead master fails fast only the checks whose keys live on it
// while every other check still goes to its healthy master.
type Breaker struct {
	tiers.Store
	clock    clock.Clock
	failures int
	cooldown time.Duration

	// probe, when set, tests a part of the backend ("" for the whole) while
	// its circuit is open, in place of a call (see WithProbe).
	probe        func(ctx context.Context, part string) error
	probeTimeout time.Duration
	// partition, when set, names the part of the backend an op goes to.
	partition func(ctx context.Context, op *tiers.Op) string

	mu    sync.Mutex
	whole circuit             // the circuit without partitions
	parts map[string]*circuit // with partitions, by part
}

// circuit is the state of one circuit.
type circuit struct {
	streak    int       // consecutive unavailability errors
	openUntil time.Time // zero when closed
	probing   bool      // a half-open probe is in flight
	used      time.Time // last admit (with partitions: when it may be forgotten)
}

// maxParts bounds the circuits kept with partitions: past it, circuits
// unused for a minute are forgotten (after a failover the dead master's
// part is never asked for again).
const maxParts = 64

// NewBreaker wraps s. failures and cooldown default to 3 and 100 ms.
func NewBreaker(s tiers.Store, clk clock.Clock, failures int, cooldown time.Duration) *Breaker {
	if failures < 1 {
		failures = 3
	}
	if cooldown <= 0 {
		cooldown = 100 * time.Millisecond
	}
	return &Breaker{Store: s, clock: clk, failures: failures, cooldown: cooldown}
}

// WithProbe makes the breaker, once the cooldown has passed, test the
// backend with probe (bounded by timeout) in the background instead of
// letting a real call through, and close the circuit only when probe
// succeeds; calls keep failing fast meanwhile. probe must not go through
// the store's own connection pool: go-redis stops dialling for good once
// PoolSize dials have failed (over the life of the client) and then retries
// only once a second, so probing through the pool every cooldown would hold
// enforcement off for up to a second after Redis returns. Call it before
// the breaker is used.
func (b *Breaker) WithProbe(probe func(context.Context) error, timeout time.Duration) *Breaker {
	return b.withProbe(func(ctx context.Context, _ string) error { return probe(ctx) }, timeout)
}

// WithPartitions gives each part of the backend a circuit of its own:
// partition names the part an op goes to (for a Redis Cluster, the master
// of its keys' hash slot; "" when unknown, which shares one circuit), and
// probe, as for WithProbe, tests one part. An op whose part's circuit is
// open fails at once; the others go to the store. Call it before the
// breaker is used.
func (b *Breaker) WithPartitions(partition func(ctx context.Context, op *tiers.Op) string, probe func(ctx context.Context, part string) error, timeout time.Duration) *Breaker {
	b.partition = partition
	b.parts = map[string]*circuit{}
	return b.withProbe(probe, timeout)
}

func (b *Breaker) withProbe(probe func(context.Context, string) error, timeout time.Duration) *Breaker {
	if timeout <= 0 {
		timeout = time.Second
	}
	b.probe, b.probeTimeout = probe, timeout
	return b
}

// Check passes ops to the wrapped store unless the circuit is open (with
// partitions: the ops whose part's circuit is closed).
func (b *Breaker) Check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	if b.partition != nil {
		return b.CheckEach(ctx, now, ops, func(int, error) {})
	}
	probe, err := b.admit(&b.whole, "")
	if err != nil {
		return err
	}
	err = b.Store.Check(ctx, now, ops)
	b.record(&b.whole, err, probe)
	return err
}

// CheckEach passes ops to the wrapped store unless the circuit is open,
// reporting each op as that store decides it (see EachChecker; a store that
// is not one reports them all at the end). Without partitions the breaker
// records the first error, as for Check; with them, each op's error counts
// for its part.
func (b *Breaker) CheckEach(ctx context.Context, now time.Time, ops []*tiers.Op, done func(i int, err error)) error {
	if b.partition != nil {
		return b.checkParts(ctx, now, ops, done)
	}
	probe, err := b.admit(&b.whole, "")
	if err != nil {
		for i := range ops {
			done(i, err)
		}
		return err
	}
	err = tiers.CheckEach(ctx, b.Store, now, ops, done)
	b.record(&b.whole, err, probe)
	return err
}

// CheckEachPeeking is CheckEach with peeks read before any op counts
// (tiers.PeekingChecker): in the ops' own call through the whole circuit,
// which the read's failure and the ops' count against as one call. With
// partitions, or a store that cannot, the read goes first on its own
// (PeekFixed), then the ops (CheckEach).
func (b *Breaker) CheckEachPeeking(ctx context.Context, now time.Time, peeks []tiers.FixedPeek, ops []*tiers.Op, done func(i int, err error)) (readErr, err error) {
	pc, ok := b.Store.(tiers.PeekingChecker)
	if !ok || b.partition != nil {
		readErr = b.PeekFixed(ctx, now, peeks)
		return readErr, b.CheckEach(ctx, now, ops, done)
	}
	probe, err := b.admit(&b.whole, "")
	if err != nil {
		for i := range ops {
			done(i, err)
		}
		return err, err
	}
	readErr, err = pc.CheckEachPeeking(ctx, now, peeks, ops, done)
	b.record(&b.whole, cmp.Or(err, readErr), probe)
	return readErr, err
}

// checkParts is CheckEach with partitions: the ops whose part is open fail
// at once, the others go to the store in one batch, in order.
func (b *Breaker) checkParts(ctx context.Context, now time.Time, ops []*tiers.Op, done func(i int, err error)) error {
	circuits := make([]*circuit, len(ops))
	probes := make([]bool, len(ops))
	pass := make([]*tiers.Op, 0, len(ops))
	at := make([]int, 0, len(ops))
	var first error
	for i, op := range ops {
		part := b.partition(ctx, op)
		c := b.circuitOf(part)
		probe, err := b.admit(c, part)
		if err != nil {
			first = cmp.Or(first, err)
			done(i, err)
			continue
		}
		circuits[i], probes[i] = c, probe
		pass, at = append(pass, op), append(at, i)
	}
	if len(pass) == 0 {
		return first
	}
	err := tiers.CheckEach(ctx, b.Store, now, pass, func(k int, err error) {
		i := at[k]
		b.record(circuits[i], err, probes[i])
		done(i, err)
	})
	return cmp.Or(first, err)
}

// circuitOf returns part's circuit, made on first use.
func (b *Breaker) circuitOf(part string) *circuit {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.parts[part]
	if c == nil {
		if len(b.parts) >= maxParts {
			for p, old := range b.parts {
				if b.clock.Now().Sub(old.used) > time.Minute && !old.probing {
					delete(b.parts, p)
				}
			}
		}
		c = &circuit{}
		b.parts[part] = c
	}
	return c
}

// admit says whether a call may go to the store through c, and whether it
// is the probe.
func (b *Breaker) admit(c *circuit, part string) (probe bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	c.used = now
	if c.openUntil.IsZero() {
		return false, nil
	}
	if now.Before(c.openUntil) || c.probing {
		return false, b.openErr(part)
	}
	c.probing = true
	if b.probe != nil {
		go b.runProbe(c, part)
		return false, b.openErr(part)
	}
	return true, nil
}

func (b *Breaker) openErr(part string) error {
	if part != "" {
		return fmt.Errorf("%s (%s): %w: %w", b.Tier(), part, tiers.ErrUnavailable, ErrCircuitOpen)
	}
	return fmt.Errorf("%s: %w: %w", b.Tier(), tiers.ErrUnavailable, ErrCircuitOpen)
}

// runProbe tests the backend (part) with the probe and closes c if it
// answers, or keeps it open for another cooldown.
func (b *Breaker) runProbe(c *circuit, part string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.probeTimeout)
	err := b.probe(ctx, part)
	cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	c.probing = false
	if err == nil {
		c.streak = 0
		c.openUntil = time.Time{}
		return
	}
	c.openUntil = b.clock.Now().Add(b.cooldown)
}

func (b *Breaker) record(c *circuit, err error, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		c.probing = false
	}
	if err == nil || !errors.Is(err, tiers.ErrUnavailable) || errors.Is(err, tiers.ErrColdUnavailable) {
		c.streak = 0
		c.openUntil = time.Time{}
		return
	}
	c.streak++
	if c.streak >= b.failures || probe || timedOut(err) {
		c.openUntil = b.clock.Now().Add(b.cooldown)
	}
}

// timedOut reports an unavailability error that is the backend's timeout: it
// took a whole QUOTA_REDIS_TIMEOUT and did not answer, a hang rather than a
// refusal. The breaker opens on the first: a coalesced batch is one
// failure however many checks it holds, and a worker that had to wait for
// two more such failures sent the whole queue into the hang again, so
// checks waited two or three timeouts instead of one (docs/reliability.md). A
// caller's own deadline (context.DeadlineExceeded, also a net.Error
// timeout) says nothing about the backend and does not count.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded)
}

// Open reports whether a circuit (with partitions: any) is refusing calls now.
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	open := func(c *circuit) bool { return !c.openUntil.IsZero() && now.Before(c.openUntil) }
	if open(&b.whole) {
		return true
	}
	for _, c := range b.parts {
		if open(c) {
			return true
		}
	}
	return false
}

// PeekFixed passes peeks to the wrapped store when it reads them
// (tiers.FixedPeeker) and the circuit admits them; otherwise none is
// Found and the ops go the way of a check. A failed read counts as a
// failed call. With partitions (a Redis Cluster's masters) each master's
// peeks go through its own circuit, and those of a master that is open
// or fails stay not Found while the others are read.
func (b *Breaker) PeekFixed(ctx context.Context, now time.Time, peeks []tiers.FixedPeek) error {
	p, ok := b.Store.(tiers.FixedPeeker)
	if !ok {
		return tiers.ErrCannotPeek
	}
	if b.partition != nil {
		b.peekParts(ctx, now, p, peeks)
		return nil
	}
	probe, err := b.admit(&b.whole, "")
	if err != nil {
		return err
	}
	err = p.PeekFixed(ctx, now, peeks)
	b.record(&b.whole, err, probe)
	return err
}

// peekParts reads peeks one part at a time, each through its circuit.
func (b *Breaker) peekParts(ctx context.Context, now time.Time, p tiers.FixedPeeker, peeks []tiers.FixedPeek) {
	parts := make([]string, len(peeks))
	for i := range peeks {
		cell := tiers.Op{Cells: peeks[i].Op.Cells[peeks[i].Cell : peeks[i].Cell+1]}
		parts[i] = b.partition(ctx, &cell)
	}
	read := make([]bool, len(peeks))
	for i := range peeks {
		if read[i] {
			continue
		}
		var group []tiers.FixedPeek
		var at []int
		for j := i; j < len(peeks); j++ {
			if parts[j] == parts[i] {
				group, at, read[j] = append(group, peeks[j]), append(at, j), true
			}
		}
		c := b.circuitOf(parts[i])
		probe, err := b.admit(c, parts[i])
		if err != nil {
			continue
		}
		err = p.PeekFixed(ctx, now, group)
		b.record(c, err, probe)
		if err != nil {
			continue
		}
		for k, j := range at {
			peeks[j].Found = group[k].Found
		}
	}
}
