package activity

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// activityRow is a cell's cell_activity row.
type activityRow struct{ since, calls int64 }

// activityRows reads cell_activity of every shard.
func activityRows(t *testing.T, dbs []*sql.DB) map[tiers.CellID]activityRow {
	t.Helper()
	rows := map[tiers.CellID]activityRow{}
	for _, db := range dbs {
		rs, err := db.Query("SELECT k, since, calls FROM cell_activity")
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var k []byte
			var r activityRow
			if err := rs.Scan(&k, &r.since, &r.calls); err != nil {
				t.Fatal(err)
			}
			rows[tiers.CellID(k)] = r
		}
		rs.Close()
	}
	return rows
}

// countRows counts a table's rows over every shard.
func countRows(t *testing.T, dbs []*sql.DB, table string) int {
	t.Helper()
	total := 0
	for _, db := range dbs {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// foldAll folds every part's flushed activity, as a cycle does part by part.
func foldAll(t *testing.T, dbs []*sql.DB) {
	t.Helper()
	for _, db := range dbs {
		for part := range PartsPerShard {
			if _, err := FoldLog(context.Background(), db, part); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// dailyRefs are n daily cells of n apps.
func dailyRefs(n int) []tiers.Ref {
	refs := make([]tiers.Ref, n)
	for i := range refs {
		app := "app-" + testenv.RandomHex(4)
		id := tiers.IdentityOf("daily", []string{app, testenv.RandomHex(6)})
		refs[i] = tiers.Ref{Identity: id, Window: 24 * time.Hour, Tag: tiers.TagOf(app), ShardKey: tiers.ShardKeyOf(app, "")}
	}
	return refs
}

// A flush of many cells writes a few batches per shard, not a row per
// cell, and no cell_activity row: that is the fold's.
func TestActivity_FlushWritesBatchesNotARowPerCell(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 2)
	act := &Activity{DBs: dbs}
	const cells = 10_000
	refs := dailyRefs(cells)
	act.Observe(refs)
	act.Observe(refs[:10])
	if err := act.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Each shard: a row per part, plus one per logBatchCells cells.
	maxRows := len(dbs) * (PartsPerShard + cells/logBatchCells)
	if n := countRows(t, dbs, "cell_activity_log"); n == 0 || n > maxRows {
		t.Fatalf("%d cell_activity_log rows for %d cells, want 1..%d", n, cells, maxRows)
	}
	if n := countRows(t, dbs, "cell_activity"); n != 0 {
		t.Fatalf("%d cell_activity rows after a flush, want 0", n)
	}
	foldAll(t, dbs)
	rows := activityRows(t, dbs)
	if len(rows) != cells {
		t.Fatalf("%d cells folded, want %d", len(rows), cells)
	}
	for i, r := range refs {
		want := int64(1)
		if i < 10 {
			want = 2
		}
		if got := rows[r.ID()].calls; got != want {
			t.Fatalf("cell %d: %d calls, want %d", i, got, want)
		}
	}
	if n := countRows(t, dbs, "cell_activity_log"); n != 0 {
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
	refs := dailyRefs(3)
	flush := func() {
		t.Helper()
		if err := act.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	act.Observe(refs[:2])
	flush()
	foldAll(t, dbs) // refs[0] and [1] have a history from 10:00
	now = now.Add(time.Hour)
	act.Observe(refs)
	act.Observe(refs[1:])
	flush()
	now = now.Add(time.Hour)
	act.Observe(refs[2:])
	flush()
	foldAll(t, dbs)
	hour := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC).Unix() / 3600
	want := []activityRow{{hour, 2}, {hour, 3}, {hour + 1, 3}}
	rows := activityRows(t, dbs)
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
	refs := dailyRefs(4000)
	const flushes = 20
	for range flushes {
		act.Observe(refs)
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
	rows := activityRows(t, dbs)
	for i, r := range refs {
		if got := rows[r.ID()].calls; got != flushes {
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
	refs := dailyRefs(1)
	part := PartOfCell(refs[0].ID())
	if _, err := dbs[0].Exec("INSERT INTO cell_activity_log (part, hour, cells) VALUES (?, 1, ?)", part, []byte{0x7f, 1, 2}); err != nil {
		t.Fatal(err)
	}
	act.Observe(refs)
	if err := act.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, err := FoldLog(context.Background(), dbs[0], part)
	if err == nil || n != 1 {
		t.Fatalf("fold: %d cells, %v; want 1 cell and the unreadable row reported", n, err)
	}
	if rows := activityRows(t, dbs); rows[refs[0].ID()].calls != 1 {
		t.Fatalf("cell_activity %v, want the flushed cell with 1 call", rows)
	}
	if n := countRows(t, dbs, "cell_activity_log"); n != 0 {
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
		act.Observe(dailyRefs(cells))
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
