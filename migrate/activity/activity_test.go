package activity

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// A flush of many cells writes a few batches per shard, not a row per
// cell, and no cell_activity row: that is the fold's.
func TestActivity_FlushWritesBatchesNotARowPerCell(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 2)
	act := &Activity{DBs: dbs}
	const cells = 10_000
	refs := moveenv.DailyRefs(cells)
	act.Observe(moveenv.CellsOf(refs))
	act.Observe(moveenv.CellsOf(refs[:10]))
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
	act.Observe(moveenv.CellsOf(refs[:2]))
	flush()
	moveenv.FoldAll(t, dbs, PartsPerShard, FoldLog) // refs[0] and [1] have a history from 10:00
	now = now.Add(time.Hour)
	act.Observe(moveenv.CellsOf(refs))
	act.Observe(moveenv.CellsOf(refs[1:]))
	flush()
	now = now.Add(time.Hour)
	act.Observe(moveenv.CellsOf(refs[2:]))
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
		act.Observe(moveenv.CellsOf(refs))
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
	act.Observe(moveenv.CellsOf(refs))
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
		act.Observe(moveenv.CellsOf(moveenv.DailyRefs(cells)))
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
