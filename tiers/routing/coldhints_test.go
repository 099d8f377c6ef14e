package routing

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// idAt is a cell id whose slot index (low bits of its first 8 bytes) is
// slot and whose tag bytes are tag.
func idAt(slot, tag byte) tiers.CellID {
	var id tiers.CellID
	id[0], id[8] = slot, tag
	return id
}

func TestColdHints_RemembersForgetsAndOverwrites(t *testing.T) {
	t.Parallel()
	a, b, c := idAt(1, 10), idAt(1, 20), idAt(2, 10) // a and b share a slot
	for _, tc := range []struct {
		name string
		do   func(h *ColdHints)
		has  map[tiers.CellID]bool
	}{
		{"empty", func(*ColdHints) {}, map[tiers.CellID]bool{a: false, b: false, c: false}},
		{"added", func(h *ColdHints) { h.Add(a); h.Add(c) }, map[tiers.CellID]bool{a: true, b: false, c: true}},
		{"forgotten", func(h *ColdHints) { h.Add(a); h.Add(c); h.Forget(a) }, map[tiers.CellID]bool{a: false, c: true}},
		{"overwritten by its slot's other id", func(h *ColdHints) { h.Add(a); h.Add(b) }, map[tiers.CellID]bool{a: false, b: true}},
		// a's Forget must not drop b, which took the slot since.
		{"forgetting an overwritten id keeps the new one", func(h *ColdHints) { h.Add(a); h.Add(b); h.Forget(a) }, map[tiers.CellID]bool{a: false, b: true}},
		// The tag's low bit is set to tell a hint from an empty slot.
		{"a zero tag is not an empty slot", func(h *ColdHints) { h.Add(idAt(3, 0)) }, map[tiers.CellID]bool{idAt(3, 0): true, idAt(3, 1): true, idAt(3, 2): false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := NewColdHints(16)
			tc.do(h)
			for id, want := range tc.has {
				if got := h.Has(id); got != want {
					t.Errorf("Has(slot %d, tag %d) = %v, want %v", id[0], id[8], got, want)
				}
			}
		})
	}
}

func TestColdHints_SizeRoundsUpAndNilHasNoHints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, slots int }{{-1, 0}, {0, 0}, {1, 1}, {3, 4}, {16, 16}, {1000, 1024}} {
		h := NewColdHints(tc.n)
		if got := h.Slots(); got != tc.slots {
			t.Errorf("NewColdHints(%d): %d slots, want %d", tc.n, got, tc.slots)
		}
		id := idAt(5, 7)
		h.Add(id) // a nil table takes no hints and does not panic
		if got := h.Has(id); got != (tc.slots > 0) {
			t.Errorf("NewColdHints(%d): Has after Add = %v", tc.n, got)
		}
		h.Forget(id)
		if h.Has(id) {
			t.Errorf("NewColdHints(%d): Has after Forget", tc.n)
		}
	}
}

// hintRouter is a router over two counted shard databases, with or
// without cold hints.
func hintRouter(t *testing.T, hints bool) (*Router, *cold.Store, func() int64) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	dbs, trips := testenv.CountedShards(t, 2)
	cold := cold.NewStore(dbs, cold.Options{})
	r := NewRouter(hot.NewStore(rdb, hot.Options{Prefix: prefix}), warm.NewStore(rdb, warm.Options{Prefix: prefix}), cold)
	if hints {
		r.ColdHints = NewColdHints(1024)
	}
	return r, cold, func() int64 { return trips.Swap(0) }
}

// A cold cell's first check looks its row up (one round trip) before the
// transaction (two); with hints, its next checks skip the lookup, alone
// and in a batch's group.
func TestRouter_HintedColdCellSkipsTheRowLookup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		hints bool
		batch int
		want  [3]int64 // MySQL round trips of three checks in a row
	}{
		{"no hints, one op", false, 1, [3]int64{3, 3, 3}},
		{"hints, one op", true, 1, [3]int64{3, 2, 2}},
		{"no hints, a batch", false, 3, [3]int64{3, 3, 3}},
		{"hints, a batch", true, 3, [3]int64{3, 2, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, cold, trips := hintRouter(t, tc.hints)
			var cells []confCell
			for range tc.batch {
				cells = append(cells, tierstest.CellOnShard(t, cold, 0, 100))
			}
			makeCold(t, r, cells...)
			trips()
			for k, want := range tc.want {
				var ops []*tiers.Op
				for _, c := range cells {
					ops = append(ops, confOp(confT0, 1, tiers.Enforce, c))
				}
				routerCheck(t, r, ops...)
				if n := trips(); n != want {
					t.Errorf("check %d: %d MySQL round trips, want %d", k+1, n, want)
				}
				for i, op := range ops {
					if !op.Committed || op.Out[0].Tier != tiers.Cold || op.Out[0].Remaining != int64(100-k-1) {
						t.Fatalf("check %d, op %d: committed %v, outcome %+v", k+1, i, op.Committed, op.Out[0])
					}
				}
			}
		})
	}
}

// A hint for a cell with no cold row (a new cell, or a row gone since)
// costs a retry, never a count: the cell is counted once where it really
// is, and the hint is forgotten.
func TestRouter_StaleColdHintCountsOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		gone bool // the cell was cold, and its row deleted (else it is new)
		size int  // ops in the batch: the stale one in the middle
	}{
		{"new cell, alone", false, 1},
		{"new cell, in a batch", false, 3},
		{"cold row deleted, alone", true, 1},
		{"cold row deleted, in a batch", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, cold, _ := hintRouter(t, true)
			ctx := context.Background()
			stale := newConfCell(10, time.Hour)
			if tc.gone {
				makeCold(t, r, stale)
				routerCheck(t, r, confOp(confT0, 1, tiers.Enforce, stale)) // found cold: hinted
				if err := cold.Delete(ctx, []tiers.Ref{stale.Ref()}); err != nil {
					t.Fatal(err)
				}
			} else {
				r.ColdHints.Add(stale.Ref().ID())
			}
			var others []confCell
			var ops []*tiers.Op
			for i := range tc.size {
				if i == tc.size/2 {
					ops = append(ops, confOp(confT0, 1, tiers.Enforce, stale))
					continue
				}
				c := newConfCell(10, time.Hour)
				makeCold(t, r, c)
				others = append(others, c)
				ops = append(ops, confOp(confT0, 1, tiers.Enforce, c))
			}
			routerCheck(t, r, ops...)
			for i, op := range ops {
				if !op.Committed {
					t.Fatalf("op %d not counted: %+v", i, op.Out)
				}
			}
			// A new cell never reaches its hint (the cold filter says it is
			// not cold); a cell once cold does, and the hint goes.
			if tc.gone && r.ColdHints.Has(stale.Ref().ID()) {
				t.Error("the stale hint is still there")
			}
			if used, tier := usedOf(t, r, stale); used != 1 || tier != tiers.Hot {
				t.Errorf("stale-hinted cell: %d used in %s, want 1 in hot (placed new)", used, tier)
			}
			for _, c := range others {
				if used, tier := usedOf(t, r, c); used != 1 || tier != tiers.Cold {
					t.Errorf("cold cell beside it: %d used in %s, want 1 in cold", used, tier)
				}
			}
		})
	}
}

// Slots returns the table's size (0 for nil).
func (h *ColdHints) Slots() int {
	if h == nil {
		return 0
	}
	return len(h.slots)
}
