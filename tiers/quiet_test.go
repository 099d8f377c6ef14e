package tiers

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// InsertNew writes a record only where its cell has no row; DeleteUnchanged
// deletes a row only while it holds exactly the record given: a row a
// check has counted in since, or one InsertNew left alone, is kept.
func TestColdStore_InsertNewAndDeleteUnchangedKeepCountedRows(t *testing.T) {
	t.Parallel()
	s := NewColdStore(testenv.MySQLShards(t, 2), ColdOptions{})
	ctx := context.Background()
	counted, held, untouched := newConfCell(10, time.Hour), newConfCell(10, time.Hour), newConfCell(10, time.Hour)
	if err := s.Check(ctx, confT0, []*Op{confOp(confT0, 4, Enforce, held)}); err != nil {
		t.Fatal(err)
	}
	m := &HotMover{Now: func() time.Time { return confT0 }}
	refs := []Ref{counted.ref(), held.ref(), untouched.ref()}
	recs, err := m.QuietRecords(refs, make([]HotState, len(refs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InsertNew(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, confT0, []*Op{confOp(confT0, 2, Enforce, counted)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUnchanged(ctx, recs); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Exists(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	if !rows[0] || !rows[1] || rows[2] {
		t.Fatalf("rows after the delete: %v, want counted and held kept, untouched gone", rows)
	}
	got, err := s.Export(ctx, refs[:2])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Count != 2 || got[1].Count != 4 {
		t.Fatalf("records %+v, want counts 2 and 4", got)
	}
}

// An idle cell's record counts 0 in the current window and loses to any
// record of it, so an import of a count over it keeps the count.
func TestQuietRecords_AnIdleCellsRecordLosesToACountOfTheWindow(t *testing.T) {
	t.Parallel()
	s := NewColdStore(testenv.MySQLShards(t, 1), ColdOptions{})
	ctx := context.Background()
	c := newConfCell(10, time.Hour)
	m := &HotMover{Now: func() time.Time { return confT0 }}
	idle, err := m.QuietRecords([]Ref{c.ref()}, make([]HotState, 1))
	if err != nil {
		t.Fatal(err)
	}
	st := recState{rec: idle[0], present: true}
	if u := st.used(3600, confT0.Unix()); u != 0 {
		t.Fatalf("idle record uses %d of the window", u)
	}
	if err := s.InsertNew(ctx, idle); err != nil {
		t.Fatal(err)
	}
	// What a move of the cell counting since (hot, 3 calls) imports.
	nowS := confT0.Unix()
	if err := s.Import(ctx, []Record{{Ref: c.ref(), Count: 3, Last: nowS, First: nowS}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Export(ctx, []Ref{c.ref()})
	if err != nil || len(got) != 1 || got[0].Count != 3 {
		t.Fatalf("after the import: %+v %v, want count 3", got, err)
	}
}

// A record that has seen no call (a move's empty copy) observes no
// interval at its first call: the time since it was made is not one.
func TestRecord_AnEmptyCopyObservesNoIntervalAtItsFirstCall(t *testing.T) {
	t.Parallel()
	ref := Ref{Window: time.Hour}
	s := &recState{rec: Record{Ref: ref, Last: recT - 3*3600, First: recT - 3*3600}, present: true}
	s.count(&ref, 3600, recT+10, 1)
	if s.rec.Samples != 0 || s.rec.MeanInterval != 0 || s.rec.Count != 1 {
		t.Fatalf("after the first call: %+v", s.rec)
	}
	s.count(&ref, 3600, recT+70, 1)
	if s.rec.Samples != 1 || s.rec.MeanInterval != 60 || s.rec.Count != 2 {
		t.Fatalf("after the second call: %+v", s.rec)
	}
}

// A quiet cell's record of its count loses to any later copy of the cell's
// state in the same window, even one made by a mover whose clock is behind
// (a hot export's Last is its mover's now): a record a stopped quiet move
// left never wins over the cell's next move into cold. It is of the window
// States read, with the count read.
func TestQuietRecords_ACountLosesToAnyLaterCopyOfItsWindow(t *testing.T) {
	t.Parallel()
	c := newConfCell(10, time.Hour)
	ref := c.ref()
	idx := confT0.UnixMilli() / time.Hour.Milliseconds()
	m := &HotMover{Now: func() time.Time { return confT0.Add(40 * time.Minute) }}
	recs, err := m.QuietRecords([]Ref{ref}, []HotState{{Counting: true, Count: "7", Window: idx}})
	if err != nil {
		t.Fatal(err)
	}
	q := recs[0]
	if q.Count != 7 || q.Index() != idx {
		t.Fatalf("quiet record %+v: want count 7 of window %d", q, idx)
	}
	for _, behind := range []time.Duration{0, 10 * time.Second, 39 * time.Minute} {
		at := confT0.Add(40*time.Minute - behind)
		later, err := hotRecord(&ref, idx, false, at, "7")
		if err != nil {
			t.Fatal(err)
		}
		if !later.NewerThan(&q) {
			t.Errorf("a copy of the window made at %s (a clock %s behind) does not win over the quiet record", at.Format(time.TimeOnly), behind)
		}
	}
}

// States reads the counters of a call's cells with one MGET, in slices of
// 4,000 keys (dir_mget): each of 2,500 cells in one call, 5,000 counter
// keys, gets its own state, the counted ones their count.
func TestStates_ManyCellsInOneCallEachGetTheirOwn(t *testing.T) {
	t.Parallel()
	r, _ := newGroupRouter(t)
	cells := make([]confCell, 2500)
	refs := make([]Ref, len(cells))
	var ops []*Op
	for i := range cells {
		cells[i] = newConfCell(10, time.Hour)
		refs[i] = cells[i].ref()
		for range i % 3 { // cell i counted i%3 times
			ops = append(ops, confOp(confT0, 1, Enforce, cells[i]))
		}
	}
	routerCheck(t, r, ops...)
	m := &HotMover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
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
	routerCheck(t, r, confOp(confT0, 1, Enforce, c), confOp(confT0, 1, Enforce, c))
	m := &HotMover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
	ctx := context.Background()
	refs := []Ref{c.ref(), c.ref()}
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
			m := &HotMover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return now }}
			ctx := context.Background()
			refs := []Ref{c.ref()}
			states, err := m.States(ctx, refs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !states[0].Idle() {
				t.Fatalf("state %+v, want idle", states[0])
			}
			now = confT0.Add(2 * time.Hour)
			if tc.countLater {
				routerCheck(t, r, confOp(now, 1, Enforce, c))
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
	rdb := r.Hot().rdb
	idle, asked, counted := newConfCell(10, time.Hour), newConfCell(10, time.Hour), newConfCell(10, time.Hour)
	routerCheck(t, r, confOp(confT0, 1, Enforce, counted))
	m := &HotMover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
	ctx := context.Background()
	states, err := m.States(ctx, []Ref{idle.ref(), asked.ref(), counted.ref()}, []bool{false, true, true})
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
		cell := tc.c.at(confT0)
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
			m := &HotMover{Hot: r.Hot(), Warm: r.warm, Now: func() time.Time { return confT0 }}
			ctx := context.Background()
			refs := make([]Ref, tc.cells)
			var ops []*Op
			first := newConfCell(10, time.Hour)
			for i := range refs {
				c := newConfCell(10, time.Hour)
				c.app, c.vals[0] = first.app, first.app
				refs[i] = c.ref()
				for range tc.counted {
					ops = append(ops, confOp(confT0, 1, Enforce, c))
				}
			}
			routerCheck(t, r, ops...)
			if tc.room {
				other := newConfCell(10, time.Hour)
				other.app, other.vals[0] = first.app, first.app
				room := func(Tag) int { return tc.cells + 1 }
				if _, err := r.warm.SwitchToCold(ctx, []DirSwap{{Ref: other.ref()}}, room); err != nil {
					t.Fatal(err)
				}
			}
			states, err := m.States(ctx, refs, slices.Repeat([]bool{true}, len(refs)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.inFilter {
				swaps := make([]DirSwap, len(refs))
				for i := range refs {
					swaps[i] = DirSwap{Ref: refs[i]} // field absent: into the filter
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
