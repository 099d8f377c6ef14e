package worker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/tiers"
)

// newWorkerEnv is newEnv with activity counting and a worker whose
// activity lives on the cold shards.
func newWorkerEnv(t *testing.T) (*env, *Worker) {
	t.Helper()
	e := newEnv(t)
	return e, e.worker(Config{Schedule: "@daily", HotThreshold: 20, ColdThreshold: 2, PromoteInterval: 10 * time.Second, DemoteInterval: time.Hour, BatchSize: 3})
}

// newOwnWorkerEnv is newWorkerEnv with the mover's journal and leases
// under a prefix of their own (env.ownJournal).
func newOwnWorkerEnv(t *testing.T) (*env, *Worker) {
	t.Helper()
	e, w := newWorkerEnv(t)
	e = e.ownJournal()
	w.Mover = e.mover
	return e, w
}

// worker is a worker over e's tiers with cfg, counting the activity of
// e's router on the cold shards.
func (e *env) worker(cfg Config) *Worker {
	dbs := e.Cold.DBs()
	act := &activity.Activity{DBs: dbs, Now: e.Clock.Now}
	e.Router.Calls = act.Observe
	return &Worker{Mover: e.mover, Activity: act, DBs: dbs, Now: e.Clock.Now, Config: cfg}
}

// A cycle moves each cell by its mean calls per hour, in batches, and a
// second cycle moves nothing.
func TestCycle(t *testing.T) {
	t.Parallel()
	e, w := newWorkerEnv(t)
	busy, some, rare := moveenv.NewCell(1000), moveenv.NewCell(1000), moveenv.NewCell(1000)
	e.Place(t, tiers.Cold, busy)
	e.Place(t, tiers.Warm, rare)
	calls := map[*moveenv.Cell]int{&busy: 50, &some: 10, &rare: 1}
	for c, n := range calls {
		for range n {
			e.Check(t, tiers.Enforce, *c)
		}
	}
	// Two hours later: 25, 5 and 0.5 calls an hour.
	e.Clock.Advance(2 * time.Hour)
	rep, err := w.RunCycle(context.Background())
	if err != nil {
		t.Fatal(err, rep.Errors)
	}
	t.Logf("%+v", rep)
	for c, want := range map[*moveenv.Cell]tiers.Tier{&busy: tiers.Hot, &some: tiers.Warm, &rare: tiers.Cold} {
		if got := e.TierOf(t, *c); got != want {
			t.Errorf("cell with %d calls: tier %q, want %q", calls[c], got, want)
		}
	}
	if rep.Moved["cold>hot"] != 1 || rep.Moved["hot>warm"] != 1 || rep.Moved["warm>cold"] != 1 || rep.Scanned != 3 || rep.Folded != 3 {
		t.Errorf("report %+v", rep)
	}
	rep, err = w.RunCycle(context.Background())
	if err != nil || len(rep.Moved) != 0 || rep.Folded != 0 {
		t.Fatalf("second cycle: %+v %v", rep, err)
	}
}

// moving reports whether an on-call move is queued or running.
func (w *Worker) moving() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queued) > 0
}

// On call: a warm cell called often is promoted to hot at once, a cold one
// to warm (on the record its check left), off the check path.
func TestOnCallPromotion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ from, to tiers.Tier }{
		{tiers.Warm, tiers.Hot},
		{tiers.Cold, tiers.Warm},
	} {
		t.Run(string(tc.from), func(t *testing.T) {
			t.Parallel()
			e, w := newWorkerEnv(t)
			e.Router.Observe = w.Observe
			stop, err := w.Start(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			c := moveenv.NewCell(1000)
			e.Place(t, tc.from, c)
			for range 6 {
				e.Clock.Advance(2 * time.Second)
				e.Check(t, tiers.Enforce, c)
			}
			// Calls after a cold cell reached warm may take it on to hot;
			// "" is a cell frozen by a move. The count is read once no
			// move is queued or running.
			deadline := time.Now().Add(5 * time.Second)
			for got := e.TierOf(t, c); (got != tc.to && got != tiers.Hot) || w.moving(); got = e.TierOf(t, c) {
				if time.Now().After(deadline) {
					t.Fatalf("not promoted: tier %q, want %s (or hot)", got, tc.to)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := e.Count(t, c); n != 6 {
				t.Fatalf("count %d after promotion, want 6", n)
			}
		})
	}
}

// Cells of windows shorter than the router's CallsMinWindow leave no
// history: checks on them write no cell_activity row.
func TestActivity_CellsOfShortWindowsLeaveNoHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dbs := e.Cold.DBs()
	act := &activity.Activity{DBs: dbs, Now: e.Clock.Now}
	e.Router.Calls, e.Router.CallsMinWindow = act.Observe, 2*time.Hour
	hourly, daily := moveenv.NewCell(10), moveenv.NewCell(10)
	daily.Window = 24 * time.Hour
	for range 3 {
		e.Check(t, tiers.Enforce, hourly, daily)
	}
	if err := act.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	moveenv.FoldAll(t, dbs, activity.PartsPerShard, activity.FoldLog)
	rows := moveenv.ActivityRows(t, dbs)
	if len(rows) != 1 || rows[daily.Ref().ID()].Calls != 3 {
		t.Fatalf("cell_activity %v, want only the daily cell with 3 calls", rows)
	}
}

// A part's scan window is moved sorted by tag (so that a batch's scripts
// visit few tags), each tag's cells in scan order, with their targets.
func TestSortByTag_SortsByTagKeepingTheScanOrderWithinATag(t *testing.T) {
	t.Parallel()
	tag := func(b byte) tiers.Tag { return tiers.Tag{b, 0, 0} }
	cells := []scannedCell{
		{tiers.Ref{Tag: tag(2), ShardKey: 1}, tiers.Cold}, {tiers.Ref{Tag: tag(1), ShardKey: 2}, tiers.Warm},
		{tiers.Ref{Tag: tag(2), ShardKey: 3}, tiers.Hot}, {tiers.Ref{Tag: tag(1), ShardKey: 4}, tiers.Cold},
		{tiers.Ref{Tag: tag(3), ShardKey: 5}, tiers.Warm},
	}
	sortByTag(cells)
	var gotKeys []uint64
	var gotTo []tiers.Tier
	for _, c := range cells {
		gotKeys, gotTo = append(gotKeys, c.ref.ShardKey), append(gotTo, c.to)
	}
	if want := []uint64{2, 4, 1, 3, 5}; !slices.Equal(gotKeys, want) {
		t.Fatalf("order %v, want %v", gotKeys, want)
	}
	if want := []tiers.Tier{tiers.Warm, tiers.Cold, tiers.Cold, tiers.Hot, tiers.Warm}; !slices.Equal(gotTo, want) {
		t.Fatalf("targets %v, want %v", gotTo, want)
	}
}

// BenchmarkSortByTag sorts a scan window of cells of 500 tags, as a part
// of BenchmarkCycle_HotToCold's cycles reads it.
func BenchmarkSortByTag(b *testing.B) {
	cells := make([]scannedCell, 8000)
	for i := range cells {
		cells[i].ref = tiers.Ref{Tag: tiers.Tag{byte(i * 7919 % 500 / 256), byte(i * 7919 % 500), 0}, ShardKey: uint64(i)}
	}
	work := make([]scannedCell, len(cells))
	for b.Loop() {
		copy(work, cells)
		sortByTag(work)
	}
}
