package activity

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// A flush of many cells writes a few batches per shard, not a row per
// cell, and no cell_activity row: that is the fold's.
func TestActivity_FlushWritesBatchesNotARowPerCell(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 2)
	act := &Activity{DBs: dbs}
	const cells = 10_000
	refs := moveenv.DailyRefs(cells)
	act.Observe(moveenv.CellsOf(refs), 0)
	act.Observe(moveenv.CellsOf(refs[:10]), 0)
	if err := act.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Each shard: a row per part, plus one per logBatchCells cells.
	maxRows := len(dbs) * (PartsPerShard + cells/logBatchCells)
	if n := moveenv.CountRows(t, dbs, "cell_activity_log"); n == 0 || n > maxRows {
		t.Fatalf("%d cell_activity_log rows for %d cells, want 1..%d", n, cells, maxRows)
	}
	if n := moveenv.CountRows(t, dbs, "cell_activity"); n != 0 {
		t.Fatalf("%d cell_activity rows after a flush, want 0", n)
	}
	moveenv.FoldAll(t, dbs, PartsPerShard, FoldLog)
	rows := moveenv.ActivityRows(t, dbs)
	if len(rows) != cells {
		t.Fatalf("%d cells folded, want %d", len(rows), cells)
	}
	for i, r := range refs {
		want := int64(1)
		if i < 10 {
			want = 2
		}
		if got := rows[r.ID()].Calls; got != want {
			t.Fatalf("cell %d: %d calls, want %d", i, got, want)
		}
	}
	if n := moveenv.CountRows(t, dbs, "cell_activity_log"); n != 0 {
		t.Fatalf("%d cell_activity_log rows left after the fold", n)
	}
}

// Flushes of several hours fold into one history per cell: the calls
// summed, the history starting at the first flush, added to what the cell
// had.
func TestActivity_FoldAddsEveryFlushToTheCellsHistory(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 1)
	now := time.Date(2026, 11, 28, 10, 30, 0, 0, time.UTC)
	act := &Activity{DBs: dbs, Now: func() time.Time { return now }}
	refs := moveenv.DailyRefs(3)
	flush := func() {
		t.Helper()
		if err := act.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	act.Observe(moveenv.CellsOf(refs[:2]), 0)
	flush()
	moveenv.FoldAll(t, dbs, PartsPerShard, FoldLog) // refs[0] and [1] have a history from 10:00
	now = now.Add(time.Hour)
	act.Observe(moveenv.CellsOf(refs), 0)
	act.Observe(moveenv.CellsOf(refs[1:]), 0)
	flush()
	now = now.Add(time.Hour)
	act.Observe(moveenv.CellsOf(refs[2:]), 0)
	flush()
	moveenv.FoldAll(t, dbs, PartsPerShard, FoldLog)
	hour := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC).Unix() / 3600
	want := []moveenv.ActivityRow{{Since: hour, Calls: 2}, {Since: hour, Calls: 3}, {Since: hour + 1, Calls: 3}}
	rows := moveenv.ActivityRows(t, dbs)
	for i, r := range refs {
		if rows[r.ID()] != want[i] {
			t.Fatalf("cell %d: %+v, want %+v", i, rows[r.ID()], want[i])
		}
	}
}

// Two workers folding the same part at once (a stalled worker's part
// lease lapsed and another took the part over) count each batch once.
func TestActivity_TwoFoldsOfOnePartCountEachBatchOnce(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 1)
	act := &Activity{DBs: dbs}
	refs := moveenv.DailyRefs(4000)
	const flushes = 20
	for range flushes {
		act.Observe(moveenv.CellsOf(refs), 0)
		if err := act.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*PartsPerShard)
	for range 2 {
		wg.Go(func() {
			for part := range PartsPerShard {
				if _, err := FoldLog(context.Background(), dbs[0], part); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows := moveenv.ActivityRows(t, dbs)
	for i, r := range refs {
		if got := rows[r.ID()].Calls; got != flushes {
			t.Fatalf("cell %d: %d calls after %d flushes of one call", i, got, flushes)
		}
	}
}

// Calls that created their cell's hot key (appended without a lookup)
// and the others (counted in the map) add up to each cell's calls, even
// when a cell's key is created twice (its window ended) or its first call
// came after others.
func TestActivity_CallsThatCreatedTheirKeyAddUpWithTheOthers(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 2)
	act := &Activity{DBs: dbs}
	refs := moveenv.DailyRefs(300)
	cells := moveenv.CellsOf(refs)
	want := make([]int64, len(cells))
	observe := func(i int, created uint64) {
		act.Observe(cells[i:i+1], created)
		want[i]++
	}
	for i := range cells {
		switch i % 4 {
		case 0: // created, then counted twice
			observe(i, 1)
			observe(i, 0)
			observe(i, 0)
		case 1: // created twice
			observe(i, 1)
			observe(i, 1)
		case 2: // counted, then created
			observe(i, 0)
			observe(i, 1)
		case 3: // created alone
			observe(i, 1)
		}
	}
	// One op's cells, the bits saying which were created.
	act.Observe(cells[:3], 0b101)
	for i := range 3 {
		want[i]++
	}
	if err := act.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	moveenv.FoldAll(t, dbs, PartsPerShard, FoldLog)
	rows := moveenv.ActivityRows(t, dbs)
	if len(rows) != len(cells) {
		t.Fatalf("%d cells folded, want %d", len(rows), len(cells))
	}
	for i, r := range refs {
		if got := rows[r.ID()].Calls; got != want[i] {
			t.Fatalf("cell %d: %d calls, want %d", i, got, want[i])
		}
	}
}

// A flush writes each cell once, its entries added up.
func TestAddUpSameCells(t *testing.T) {
	t.Parallel()
	id := func(b byte) tiers.CellID { return tiers.CellID{b} }
	cell := func(b byte, calls int64) *pendingCell { return &pendingCell{id: id(b), calls: calls} }
	tests := []struct {
		name string
		in   []*pendingCell
		want map[byte]int64
	}{
		{"none", nil, map[byte]int64{}},
		{"distinct", []*pendingCell{cell(1, 1), cell(2, 3)}, map[byte]int64{1: 1, 2: 3}},
		{"runs", []*pendingCell{cell(1, 1), cell(1, 2), cell(2, 1), cell(3, 1), cell(3, 1), cell(3, 5)}, map[byte]int64{1: 3, 2: 1, 3: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := addUpSameCells(tt.in)
			if len(out) != len(tt.want) {
				t.Fatalf("%d cells, want %d", len(out), len(tt.want))
			}
			for _, c := range out {
				if c.calls != tt.want[c.id[0]] {
					t.Fatalf("cell %d: %d calls, want %d", c.id[0], c.calls, tt.want[c.id[0]])
				}
			}
		})
	}
}

// MaxCells bounds the entries held, the created calls' list included:
// at the bound, a call of a cell held only by its created call is
// dropped too (a lookup there would cost what the list saves).
func TestActivity_MaxCellsCountsTheCreatedCalls(t *testing.T) {
	t.Parallel()
	act := &Activity{MaxCells: 10}
	cells := moveenv.CellsOf(moveenv.DailyRefs(30))
	act.Observe(cells[8:9], 0)
	for i := range 8 {
		act.Observe(cells[i:i+1], 1)
	}
	for i := 9; i < 30; i++ {
		act.Observe(cells[i:i+1], uint64(i%2))
	}
	act.Observe(cells[8:9], 0) // in the map: counted, whatever the bound
	act.Observe(cells[0:1], 0) // only in the list: a map entry, dropped
	if act.Dropped != 21 {
		t.Fatalf("dropped %d calls, want 21", act.Dropped)
	}
	if n := len(act.pending) + len(act.created); n != 10 {
		t.Fatalf("%d entries held, want 10", n)
	}
	if p := act.pending[cells[8].CellID()]; p == nil || p.calls != 2 {
		t.Fatalf("cell 8 in the map: %+v, want 2 calls", p)
	}
}

// A row the fold cannot read is dropped and reported; the part's other
// batches are folded.
func TestActivity_FoldDropsAnUnreadableRowAndFoldsTheRest(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 1)
	act := &Activity{DBs: dbs}
	refs := moveenv.DailyRefs(1)
	part := PartOfCell(refs[0].ID())
	if _, err := dbs[0].Exec("INSERT INTO cell_activity_log (part, hour, cells) VALUES (?, 1, ?)", part, []byte{0x7f, 1, 2}); err != nil {
		t.Fatal(err)
	}
	act.Observe(moveenv.CellsOf(refs), 0)
	if err := act.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, err := FoldLog(context.Background(), dbs[0], part)
	if err == nil || n != 1 {
		t.Fatalf("fold: %d cells, %v; want 1 cell and the unreadable row reported", n, err)
	}
	if rows := moveenv.ActivityRows(t, dbs); rows[refs[0].ID()].Calls != 1 {
		t.Fatalf("cell_activity %v, want the flushed cell with 1 call", rows)
	}
	if n := moveenv.CountRows(t, dbs, "cell_activity_log"); n != 0 {
		t.Fatalf("%d cell_activity_log rows left", n)
	}
}

// The fold's cost at a cycle: cells folded into cell_activity per second,
// from flushes of 20,000 distinct daily cells each (make bench-move).
func BenchmarkFoldActivityLog(b *testing.B) {
	dbs := testenv.MySQLShards(b, 1)
	act := &Activity{DBs: dbs}
	const cells = 20_000
	ctx := context.Background()
	var folded int
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		act.Observe(moveenv.CellsOf(moveenv.DailyRefs(cells)), 0)
		if err := act.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		for part := range PartsPerShard {
			n, err := FoldLog(ctx, dbs[0], part)
			if err != nil {
				b.Fatal(err)
			}
			folded += n
		}
		took += time.Since(start)
	}
	b.ReportMetric(float64(folded)/took.Seconds(), "cells/s")
}
