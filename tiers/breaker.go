package tiers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/quota-platform/quota/clock"
)

// ErrCircuitOpen is returned (wrapped in ErrUnavailable) while a Breaker
// refuses calls after repeated failures.
var ErrCircuitOpen = errors.New("circuit open")

// ErrColdUnavailable marks (with ErrUnavailable) a cold-tier MySQL shard
// that could not answer. A Breaker does not open on it: one shard down
// must leave every check that does not need that shard decided (the
// router reaches the cold tier only after Redis answered), while the
// checks that need it answer per the fail mode.
var ErrColdUnavailable = errors.New("cold shard unavailable")

// Breaker wraps a Store so that when its backend is down checks fail at
// once instead of each waiting out a timeout: after Failures consecutive
// unavailability errors — or at once on one that is a timeout — it opens
// for Cooldown, then lets one probe through at a time until one succeeds. It never affects decisions, only how fast an
// unreachable store is reported.
type Breaker struct {
	Store
	clock    clock.Clock
	failures int
	cooldown time.Duration

	// probe, when set, tests the backend while the circuit is open, in
	// place of a call (see WithProbe).
	probe        func(context.Context) error
	probeTimeout time.Duration

	mu        sync.Mutex
	streak    int       // consecutive unavailability errors
	openUntil time.Time // zero when closed
	probing   bool      // a half-open probe is in flight
}

// NewBreaker wraps s. failures and cooldown default to 3 and 100 ms.
func NewBreaker(s Store, clk clock.Clock, failures int, cooldown time.Duration) *Breaker {
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
	if timeout <= 0 {
		timeout = time.Second
	}
	b.probe, b.probeTimeout = probe, timeout
	return b
}

// Check passes ops to the wrapped store unless the circuit is open.
func (b *Breaker) Check(ctx context.Context, now time.Time, ops []*Op) error {
	probe, err := b.admit()
	if err != nil {
		return err
	}
	err = b.Store.Check(ctx, now, ops)
	b.record(err, probe)
	return err
}

// CheckEach passes ops to the wrapped store unless the circuit is open,
// reporting each op as that store decides it (see EachChecker; a store that
// is not one reports them all at the end). The breaker records the first
// error, as for Check.
func (b *Breaker) CheckEach(ctx context.Context, now time.Time, ops []*Op, done func(i int, err error)) error {
	probe, err := b.admit()
	if err != nil {
		for i := range ops {
			done(i, err)
		}
		return err
	}
	err = CheckEach(ctx, b.Store, now, ops, done)
	b.record(err, probe)
	return err
}

// admit says whether a call may go to the store, and whether it is the probe.
func (b *Breaker) admit() (probe bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() {
		return false, nil
	}
	if b.clock.Now().Before(b.openUntil) || b.probing {
		return false, fmt.Errorf("%s: %w: %w", b.Tier(), ErrUnavailable, ErrCircuitOpen)
	}
	b.probing = true
	if b.probe != nil {
		go b.runProbe()
		return false, fmt.Errorf("%s: %w: %w", b.Tier(), ErrUnavailable, ErrCircuitOpen)
	}
	return true, nil
}

// runProbe tests the backend with the probe and closes the circuit if it
// answers, or keeps it open for another cooldown.
func (b *Breaker) runProbe() {
	ctx, cancel := context.WithTimeout(context.Background(), b.probeTimeout)
	err := b.probe(ctx)
	cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if err == nil {
		b.streak = 0
		b.openUntil = time.Time{}
		return
	}
	b.openUntil = b.clock.Now().Add(b.cooldown)
}

func (b *Breaker) record(err error, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if err == nil || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrColdUnavailable) {
		b.streak = 0
		b.openUntil = time.Time{}
		return
	}
	b.streak++
	if b.streak >= b.failures || probe || timedOut(err) {
		b.openUntil = b.clock.Now().Add(b.cooldown)
	}
}

// timedOut reports an unavailability error that is the backend's timeout: it
// took a whole QUOTA_REDIS_TIMEOUT and did not answer, a hang rather than a
// refusal. The breaker opens on the first: a coalesced batch is one
// failure however many checks it holds, and a worker that had to wait for
// two more such failures sent the whole queue into the hang again, so
// checks waited two or three timeouts instead of one (RELIABILITY.md). A
// caller's own deadline (context.DeadlineExceeded, also a net.Error
// timeout) says nothing about the backend and does not count.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded)
}

// Open reports whether the circuit is refusing calls now.
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero() && b.clock.Now().Before(b.openUntil)
}
