package routing

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// States reads the counters of a call's cells with one MGET, in slices of
// 4,000 keys (dir_mget): each of 2,500 cells in one call, 5,000 counter
// keys, gets its own state, the counted ones their count.
func TestStates_ManyCellsInOneCallEachGetTheirOwn(t *testing.T) {
	t.Parallel()
	r, _ := newGroupRouter(t)
	cells := make([]confCell, 2500)
	refs := make([]tiers.Ref, len(cells))
	var ops []*tiers.Op
	for i := range cells {
		cells[i] = newConfCell(10, time.Hour)
		refs[i] = cells[i].Ref()
		for range i % 3 { // cell i counted i%3 times
			ops = append(ops, confOp(confT0, 1, tiers.Enforce, cells[i]))
		}
	}
	routerCheck(t, r, ops...)
	m := &hot.Mover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
	states, err := m.States(context.Background(), refs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range states {
		want := strconv.Itoa(i % 3)
		if i%3 == 0 {
			want = ""
		}
		if s.Count != want || !s.Quiet() || s.Idle() != (i%3 == 0) {
			t.Fatalf("cell %d (counted %d times): state %+v", i, i%3, s)
		}
	}
}

// A cell given twice to one switch switches once: its counter, read with
// the call's others before the first switch deleted it, is gone for the
// second.
func TestSwitchQuietToCold_ACellTwiceInACallSwitchesOnce(t *testing.T) {
	t.Parallel()
	r, _ := newGroupRouter(t)
	c := newConfCell(10, time.Hour)
	routerCheck(t, r, confOp(confT0, 1, tiers.Enforce, c), confOp(confT0, 1, tiers.Enforce, c))
	m := &hot.Mover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
	ctx := context.Background()
	refs := []tiers.Ref{c.Ref(), c.Ref()}
	states, err := m.States(ctx, refs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if states[0].Count != "2" {
		t.Fatalf("state %+v, want count 2", states[0])
	}
	ok, err := m.SwitchQuietToCold(ctx, refs, states, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ok, []bool{true, false}) {
		t.Fatalf("switched %v, want the first only", ok)
	}
}

// An idle cell read in one window and switched two windows later (past
// the next window's counter, which States also read) is checked against
// the counters of the switch's window: one counted there stays hot.
func TestSwitchQuietToCold_AnIdleCellReadInAnEarlierWindowIsCheckedInTheSwitchsWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		countLater bool // a check counts the cell in the switch's window
		want       bool
	}{
		{"counted in the later window", true, false},
		{"not counted since", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, _ := newGroupRouter(t)
			c := newConfCell(10, time.Hour)
			now := confT0
			m := &hot.Mover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return now }}
			ctx := context.Background()
			refs := []tiers.Ref{c.Ref()}
			states, err := m.States(ctx, refs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !states[0].Idle() {
				t.Fatalf("state %+v, want idle", states[0])
			}
			now = confT0.Add(2 * time.Hour)
			if tc.countLater {
				routerCheck(t, r, confOp(now, 1, tiers.Enforce, c))
			}
			ok, err := m.SwitchQuietToCold(ctx, refs, states, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ok[0] != tc.want {
				t.Fatalf("switched %v, want %v", ok[0], tc.want)
			}
		})
	}
}

// States holds the idle cells it is asked to (their counter of the window
// written as 0, until the window ends) and no other: a counted cell keeps
// its count, an idle one not asked for gets no counter.
func TestStates_HoldsTheIdleCellsAskedFor(t *testing.T) {
	t.Parallel()
	r, _ := newGroupRouter(t)
	rdb := r.Hot().Client()
	idle, asked, counted := newConfCell(10, time.Hour), newConfCell(10, time.Hour), newConfCell(10, time.Hour)
	routerCheck(t, r, confOp(confT0, 1, tiers.Enforce, counted))
	m := &hot.Mover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
	ctx := context.Background()
	states, err := m.States(ctx, []tiers.Ref{idle.Ref(), asked.Ref(), counted.Ref()}, []bool{false, true, true})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name    string
		c       confCell
		held    bool
		counter string // "": none
	}{
		{"idle, not asked for", idle, false, ""},
		{"idle, asked for", asked, true, "0"},
		{"counted, asked for", counted, false, "1"},
	} {
		cell := tc.c.At(confT0)
		key := r.Hot().Key(&cell)
		v, err := rdb.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			v, err = "", nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if states[i].Held != tc.held || v != tc.counter {
			t.Errorf("%s: held %v, counter %q; want %v, %q", tc.name, states[i].Held, v, tc.held, tc.counter)
		}
		if ttl := rdb.PTTL(ctx, key).Val(); v != "" && (ttl <= 0 || ttl > time.Hour+2*time.Second) {
			t.Errorf("%s: counter TTL %v, want until the window ends", tc.name, ttl)
		}
	}
}

// A quiet cell with a count is switched only if its tag's filter did not
// hold it before the call: bits set since its state was read mean it went
// cold meanwhile (maybe cold and back, its row gone, its counter holding
// the same count), which only a switch into cold does. An idle cell (its
// 0 is worth nothing) is switched all the same; and bits that the call's
// own earlier cells set (false positives within the call) stop no cell.
func TestSwitchQuietToCold_ACountedCellTheFilterHeldBeforeTheCallStaysHot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cells    int
		counted  int64
		inFilter bool // the cells are put in the filter after States
		room     bool // the tag's filter has a layer with room for them before
		want     bool
	}{
		{"counted, put in the filter since", 1, 2, true, true, false},
		{"idle, put in the filter since", 1, 0, true, true, true},
		{"counted, not in the filter", 1, 2, false, true, true},
		{"2000 counted cells, the call's own bits in a new layer", 2000, 1, false, false, true},
		{"2000 counted cells, the call's own bits in the layer there", 2000, 1, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, _ := newGroupRouter(t)
			m := &hot.Mover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
			ctx := context.Background()
			refs := make([]tiers.Ref, tc.cells)
			var ops []*tiers.Op
			first := newConfCell(10, time.Hour)
			for i := range refs {
				c := newConfCell(10, time.Hour)
				c.App, c.Vals[0] = first.App, first.App
				refs[i] = c.Ref()
				for range tc.counted {
					ops = append(ops, confOp(confT0, 1, tiers.Enforce, c))
				}
			}
			routerCheck(t, r, ops...)
			if tc.room {
				other := newConfCell(10, time.Hour)
				other.App, other.Vals[0] = first.App, first.App
				room := func(tiers.Tag) int { return tc.cells + 1 }
				if _, err := r.warm.SwitchToCold(ctx, []warm.DirSwap{{Ref: other.Ref()}}, room); err != nil {
					t.Fatal(err)
				}
			}
			states, err := m.States(ctx, refs, slices.Repeat([]bool{true}, len(refs)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.inFilter {
				swaps := make([]warm.DirSwap, len(refs))
				for i := range refs {
					swaps[i] = warm.DirSwap{Ref: refs[i]} // field absent: into the filter
				}
				if _, err := r.warm.SwitchToCold(ctx, swaps, nil); err != nil {
					t.Fatal(err)
				}
			}
			ok, err := m.SwitchQuietToCold(ctx, refs, states, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, got := range ok {
				if got != tc.want {
					t.Fatalf("cell %d of %d: switched %v, want %v", i, len(ok), got, tc.want)
				}
			}
			recs, err := m.Export(ctx, refs[:1])
			if err != nil {
				t.Fatal(err)
			}
			if left := len(recs) == 1 && recs[0].Count == tc.counted; left == tc.want {
				t.Fatalf("hot record of the first cell: %+v, want its counter gone only if it switched", recs)
			}
		})
	}
}
