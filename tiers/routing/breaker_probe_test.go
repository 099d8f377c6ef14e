package routing_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/routing"
)

// With a probe, an open breaker never lets a call through to test the
// store: it runs the probe in the background and closes only when the
// probe succeeds, failing calls fast meanwhile.
func TestBreaker_WithProbe_ClosesOnlyWhenTheProbeSucceeds(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	store := &flakyStore{down: true}
	var up atomic.Bool
	var probes atomic.Int32
	done := make(chan struct{}, 16)
	b := routing.NewBreaker(store, clk, 3, 100*time.Millisecond).WithProbe(func(ctx context.Context) error {
		defer func() { done <- struct{}{} }()
		probes.Add(1)
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the probe has no deadline")
		}
		if up.Load() {
			return nil
		}
		return errors.New("connection refused")
	}, time.Second)
	ctx := context.Background()
	for range 3 {
		_ = b.Check(ctx, clk.Now(), nil)
	}
	if !b.Open() || store.calls != 3 {
		t.Fatalf("open %v after %d calls", b.Open(), store.calls)
	}
	// Cooldown over: the next call starts a probe and fails fast itself.
	clk.Advance(100 * time.Millisecond)
	if err := b.Check(ctx, clk.Now(), nil); !errors.Is(err, routing.ErrCircuitOpen) {
		t.Fatalf("call that starts the probe: %v", err)
	}
	<-done
	if store.calls != 3 || probes.Load() != 1 {
		t.Fatalf("store calls %d, probes %d: the probe must stand in for a call", store.calls, probes.Load())
	}
	// The probe's result is recorded just after it returns (done is sent
	// from its defer): wait for it rather than race it.
	for deadline := time.Now().Add(5 * time.Second); !b.Open() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !b.Open() {
		t.Fatal("a failed probe must keep the circuit open for another cooldown")
	}
	if err := b.Check(ctx, clk.Now(), nil); !errors.Is(err, routing.ErrCircuitOpen) || probes.Load() != 1 {
		t.Fatalf("within the new cooldown no probe: %v, probes %d", err, probes.Load())
	}
	// The store is back: the next probe succeeds and closes the circuit.
	up.Store(true)
	store.down = false
	clk.Advance(100 * time.Millisecond)
	_ = b.Check(ctx, clk.Now(), nil)
	<-done
	// The probe's result is recorded just after it returns; until then a
	// call is refused without a store call or a new probe.
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if err = b.Check(ctx, clk.Now(), nil); !errors.Is(err, routing.ErrCircuitOpen) {
			break
		}
	}
	if err != nil || store.calls != 4 || probes.Load() != 2 {
		t.Fatalf("after a successful probe calls go through: %v (store calls %d, probes %d)", err, store.calls, probes.Load())
	}
}

// A cold shard that cannot answer is not an outage of the store: the
// breaker stays closed, so checks that do not need that shard go on.
func TestBreaker_ColdShardErrorsDoNotOpenIt(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	b := routing.NewBreaker(coldDownStore{}, clk, 3, 100*time.Millisecond)
	for range 10 {
		if err := b.Check(context.Background(), clk.Now(), nil); !errors.Is(err, tiers.ErrUnavailable) {
			t.Fatalf("the store's error must come through: %v", err)
		}
	}
	if b.Open() {
		t.Fatal("ten cold-shard failures opened the circuit for every check")
	}
}

type coldDownStore struct{}

func (coldDownStore) Tier() tiers.Tier { return tiers.Cold }
func (coldDownStore) Check(context.Context, time.Time, []*tiers.Op) error {
	return fmt.Errorf("cold shard 1: %w: %w: connection refused", tiers.ErrUnavailable, tiers.ErrColdUnavailable)
}
