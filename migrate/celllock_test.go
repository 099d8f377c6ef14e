package migrate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// A check does not place a new cell whose move lease another holder has
// (a move running on it): it waits, as for a frozen cell, and places the
// cell once the lease is released.
func TestPlacement_WaitsForTheCellsMoveLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := *e.router
	r.MovedWait = 200 * time.Millisecond
	c := newCell(10)
	ctx := context.Background()
	held, unlock, err := e.mover.LockCells(ctx, refsOf(c))
	if err != nil || !held[0] {
		t.Fatalf("lock: %v %v", held, err)
	}
	check := func() (*tiers.Op, error) {
		op := &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.at(e.clock.Now())}}
		return op, r.Check(ctx, e.clock.Now(), []*tiers.Op{op})
	}
	if _, err := check(); !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("check while a move holds the lease: %v, want ErrUnavailable", err)
	}
	if raw, err := e.warm.DirRaw(ctx, refsOf(c)); err != nil || raw[0] != "" {
		t.Fatalf("directory %q (%v) while leased, want none: not placed", raw, err)
	}
	if again, _, err := e.mover.LockCells(ctx, refsOf(c)); err != nil || again[0] {
		t.Fatalf("second lock: %v %v, want not granted", again, err)
	}
	unlock()
	op, err := check()
	if err != nil || !op.Allowed() {
		t.Fatalf("check after the release: %v, allowed %v", err, op.Allowed())
	}
	if raw, err := e.warm.DirRaw(ctx, refsOf(c)); err != nil || raw[0] != tiers.DirHot {
		t.Fatalf("directory %q (%v) after the release, want placed hot", raw, err)
	}
}
