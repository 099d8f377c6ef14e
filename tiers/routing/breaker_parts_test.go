package routing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/routing"
)

// partStore is a Store double for the breaker only: the ops whose first
// cell's tag is in down fail as unavailable (a dead master), the others
// are decided; it reports each op on its own (EachChecker).
type partStore struct {
	down  map[tiers.Tag]bool
	calls map[tiers.Tag]int
}

func (p *partStore) Tier() tiers.Tier { return tiers.Hot }
func (p *partStore) Check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	return p.CheckEach(ctx, now, ops, func(int, error) {})
}
func (p *partStore) CheckEach(_ context.Context, _ time.Time, ops []*tiers.Op, done func(int, error)) error {
	var first error
	for i, op := range ops {
		tag := op.Cells[0].Tag
		p.calls[tag]++
		var err error
		if p.down[tag] {
			err = fmt.Errorf("node of %s: %w", tag, tiers.ErrUnavailable)
			first = errors.Join(first, err)
		}
		done(i, err)
	}
	return first
}

func tagOp(tag tiers.Tag) *tiers.Op { return &tiers.Op{Cells: []tiers.Cell{{Tag: tag}}} }

func TestBreaker_WithPartitions_ADeadPartFailsFastOnlyItsOwnOps(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	dead, healthy := tiers.Tag{1}, tiers.Tag{2}
	store := &partStore{down: map[tiers.Tag]bool{dead: true}, calls: map[tiers.Tag]int{}}
	probed := make(chan string, 16)
	b := routing.NewBreaker(store, clk, 3, 100*time.Millisecond).WithPartitions(
		func(_ context.Context, op *tiers.Op) string { return op.Cells[0].Tag.String() },
		func(_ context.Context, part string) error { probed <- part; return errors.New("still down") },
		time.Second)
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		ops := []*tiers.Op{tagOp(dead), tagOp(healthy), tagOp(dead)}
		errs := make([]error, len(ops))
		_ = b.CheckEach(ctx, clk.Now(), ops, func(i int, err error) { errs[i] = err })
		if errs[1] != nil {
			t.Fatalf("round %d: the healthy part's op failed: %v", round, errs[1])
		}
		if !errors.Is(errs[0], tiers.ErrUnavailable) || !errors.Is(errs[2], tiers.ErrUnavailable) {
			t.Fatalf("round %d: the dead part's ops: %v, %v", round, errs[0], errs[2])
		}
		if round >= 2 && !errors.Is(errs[0], routing.ErrCircuitOpen) {
			t.Fatalf("round %d: the dead part's circuit should be open: %v", round, errs[0])
		}
	}
	if store.calls[healthy] != 5 || store.calls[dead] > 4 {
		t.Fatalf("calls: healthy %d (want 5), dead %d (want at most 4: open after 3)", store.calls[healthy], store.calls[dead])
	}
	clk.Advance(100 * time.Millisecond)
	_ = b.Check(ctx, clk.Now(), []*tiers.Op{tagOp(dead)})
	if p := <-probed; p != dead.String() {
		t.Fatalf("probed %q, want the dead part %q", p, dead)
	}
	if err := b.Check(ctx, clk.Now(), []*tiers.Op{tagOp(healthy)}); err != nil {
		t.Fatalf("healthy part while the dead one is probed: %v", err)
	}
}

func TestBreaker_WithPartitions_AnOpMovedToANewPartIsAdmitted(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	tag := tiers.Tag{7}
	store := &partStore{down: map[tiers.Tag]bool{tag: true}, calls: map[tiers.Tag]int{}}
	master := "old:7101"
	b := routing.NewBreaker(store, clk, 1, time.Hour).WithPartitions(
		func(context.Context, *tiers.Op) string { return master },
		func(context.Context, string) error { return errors.New("down") }, time.Second)
	ctx := context.Background()
	_ = b.Check(ctx, clk.Now(), []*tiers.Op{tagOp(tag)})
	if err := b.Check(ctx, clk.Now(), []*tiers.Op{tagOp(tag)}); !errors.Is(err, routing.ErrCircuitOpen) {
		t.Fatalf("old master's circuit should be open: %v", err)
	}
	// The slot map now names the promoted replica: its circuit is closed.
	master, store.down[tag] = "new:7104", false
	if err := b.Check(ctx, clk.Now(), []*tiers.Op{tagOp(tag)}); err != nil {
		t.Fatalf("op on the promoted master: %v", err)
	}
}
