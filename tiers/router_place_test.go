package tiers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A check that found a cell new (no hot key, no directory field, no cold
// row) places it only if it is still new when it does: in the meantime
// other checks may have placed the cell, counted on it, and a move may have
// taken it to cold, where its directory field is absent as a new cell's.
// Placing it then would mark it hot over its cold count, which the next
// checks would never see (TestMoveRace over-admitted, "allowed 580, want
// 300", and a cold>hot move found the directory changed under its lease).
func TestRouter_StaleNewCellIsNotPlaced(t *testing.T) {
	t.Parallel()
	r, cold := newGroupRouter(t)
	c := newConfCell(6, time.Hour)
	var once atomic.Bool
	r.afterExists = func() {
		if !once.CompareAndSwap(false, true) {
			return
		}
		for range 5 {
			routerCheck(t, r, confOp(confT0, 1, Enforce, c))
		}
		moveHotToCold(t, r, cold, c)
	}
	op := confOp(confT0, 1, Enforce, c)
	routerCheck(t, r, op)
	if !once.Load() {
		t.Fatal("the check never found the cell new")
	}
	if !op.Allowed() {
		t.Fatal("6th call of a limit of 6 denied")
	}
	if used, tier := usedOf(t, r, c); used != 6 || tier != Cold {
		t.Fatalf("count %d in %s, want 6 in cold", used, tier)
	}
	last := confOp(confT0, 1, Enforce, c)
	routerCheck(t, r, last)
	if last.Allowed() {
		t.Fatal("7th call of a limit of 6 allowed")
	}
}

// moveHotToCold takes hot cells to cold with the steps of a move (package
// migrate, PROTOCOL.md): freeze, copy, switch, delete.
func moveHotToCold(t *testing.T, r *Router, cold *ColdStore, cells ...confCell) {
	t.Helper()
	ctx := context.Background()
	hm := &HotMover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
	var refs []Ref
	for _, c := range cells {
		refs = append(refs, c.ref())
	}
	frozen, err := hm.Freeze(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range frozen {
		if !ok {
			t.Fatalf("cell %d not hot", i)
		}
	}
	recs, err := hm.Export(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	if err := cold.Import(ctx, recs); err != nil {
		t.Fatal(err)
	}
	swaps := make([]DirSwap, len(refs))
	for i := range refs {
		swaps[i] = DirSwap{Ref: refs[i], Old: DirMoving}
	}
	if ok, err := r.warm.DirCAS(ctx, swaps); err != nil || !ok[0] {
		t.Fatalf("switch: %v %v", ok, err)
	}
	if err := hm.Delete(ctx, refs); err != nil {
		t.Fatal(err)
	}
}
