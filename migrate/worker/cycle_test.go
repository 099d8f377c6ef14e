package worker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/migrate/jobs"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
)

// secondInstance is another quotad's worker over the same Redis, shards
// and journal as w (a Mover of its own, as another process would have).
func secondInstance(e *env, w *Worker, name string) *Worker {
	m := *e.mover
	other := &Worker{Mover: &m, DBs: w.DBs, Now: w.Now, Config: w.Config, Name: name}
	return other
}

// rareCells makes n hot cells called once each, two hours ago: each
// cycle target is cold.
func rareCells(t *testing.T, e *env, n int) []moveenv.Cell {
	t.Helper()
	cells := moveenv.NewCells(n, 10, 0)
	for _, c := range cells {
		e.Check(t, tiers.Enforce, c)
	}
	return cells
}

// partOf is the cycle part that holds c's activity row.
func partOf(c moveenv.Cell, shards int) int {
	ref := c.Ref()
	id := ref.ID()
	return activity.ShardOf(&ref, shards)*activity.PartsPerShard + int(id[0])*activity.PartsPerShard/256
}

// Two instances that run the cycle at once share it: together they do
// every part once, each cell is moved once, and both report the fleet's
// cycle.
func TestCycle_TwoInstancesShareOneCycle(t *testing.T) {
	t.Parallel()
	e, w1 := newOwnWorkerEnv(t)
	w1.Name = "a"
	w2 := secondInstance(e, w1, "b")
	cells := rareCells(t, e, 60)
	e.Clock.Advance(2 * time.Hour)
	if err := w1.Activity.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	reps := make([]CycleReport, 2)
	for i, w := range []*Worker{w1, w2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := w.RunCycle(context.Background())
			if err != nil {
				t.Errorf("instance %s: %v", w.Name, err)
			}
			reps[i] = rep
		}()
	}
	wg.Wait()
	parts := 2 * activity.PartsPerShard
	for i, rep := range reps {
		by := 0
		for _, n := range rep.PartsBy {
			by += n
		}
		if rep.Cycle != reps[0].Cycle || rep.Parts != parts || by != parts || rep.Moved["hot>cold"] != len(cells) || rep.Scanned != len(cells) {
			t.Fatalf("instance %d report %+v: want cycle %s, %d parts, %d cells scanned and moved hot>cold once", i, rep, reps[0].Cycle, parts, len(cells))
		}
	}
	for _, c := range cells {
		if tier := e.TierOf(t, c); tier != tiers.Cold {
			t.Fatalf("cell in %s, want cold", tier)
		}
	}
	t.Logf("parts by instance: %v", reps[0].PartsBy)
}

// A part leased by an instance that died (its lease never renewed) is
// taken over once the lease lapses, and the cycle finishes.
func TestCycle_DeadInstancesPartIsTakenOver(t *testing.T) {
	t.Parallel()
	e, w := newOwnWorkerEnv(t)
	w.Config.PartLeaseTTL = 300 * time.Millisecond
	cells := rareCells(t, e, 8)
	e.Clock.Advance(2 * time.Hour)
	if err := w.Activity.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The dead instance started the cycle and held the part of cells[0].
	id := "run-dead"
	if err := e.mover.RDB.Set(ctx, w.cycleKey(), id, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	p := partOf(cells[0], len(w.DBs))
	if err := e.mover.RDB.Set(ctx, w.partKey(id, p), "dead-token", w.Config.PartLeaseTTL).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := w.RunCycle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cycle != id || rep.Parts != 2*activity.PartsPerShard || rep.Moved["hot>cold"] != len(cells) {
		t.Fatalf("report %+v: want the dead instance's cycle finished, every cell moved", rep)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("finished in %s: the leased part was not waited for", waited)
	}
	if tier := e.TierOf(t, cells[0]); tier != tiers.Cold {
		t.Fatalf("the dead instance's cell is %s, want cold", tier)
	}
}

// A scheduled cycle runs once per schedule: an instance whose cron fires
// after another instance finished the same minute's cycle moves nothing;
// the next schedule's cycle does.
func TestCycle_ScheduledCycleRunsOncePerSchedule(t *testing.T) {
	t.Parallel()
	e, w1 := newOwnWorkerEnv(t)
	w2 := secondInstance(e, w1, "late")
	ctx := context.Background()
	rareCells(t, e, 5)
	e.Clock.Advance(2 * time.Hour)
	first, err := w1.runCycle(ctx, "sched-100", w1.Jobs.Start(jobs.KindMigrate, "schedule"))
	if err != nil || first.Moved["hot>cold"] != 5 {
		t.Fatalf("first instance: %+v %v", first, err)
	}
	late := rareCells(t, e, 1) // called since: a move the next cycle makes
	e.Clock.Advance(2 * time.Hour)
	if err := w1.Activity.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := w2.runCycle(ctx, "sched-100", w2.Jobs.Start(jobs.KindMigrate, "schedule"))
	if err != nil || second.Cycle != "sched-100" || second.Moved["hot>cold"] != 5 || second.PartsBy["late"] != 0 {
		t.Fatalf("late instance, same schedule: %+v %v: want the first run's report and no part run", second, err)
	}
	if tier := e.TierOf(t, late[0]); tier != tiers.Hot {
		t.Fatalf("cell called since moved to %s by a cycle that had already run", tier)
	}
	next, err := w2.runCycle(ctx, "sched-200", w2.Jobs.Start(jobs.KindMigrate, "schedule"))
	if err != nil || next.Moved["hot>cold"] != 1 {
		t.Fatalf("next schedule: %+v %v", next, err)
	}
}

// After Redis lost a tag's directory header (and so its cold filter), a
// cold cell's check would count it as new; the rebuild puts the cell back
// in the filter from cell_activity and the cold rows, and its cold count
// holds again.
func TestRebuildColdFilters_ColdCountsHoldAfterRedisLostTheFilter(t *testing.T) {
	t.Parallel()
	e, w := newOwnWorkerEnv(t)
	ctx := context.Background()
	c := moveenv.NewCell(3)
	for range 3 {
		e.Check(t, tiers.Enforce, c)
	}
	if err := w.Activity.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.Move(t, tiers.Hot, tiers.Cold, c)
	if op := e.Check(t, tiers.Enforce, c); op.Allowed() {
		t.Fatal("4th call of 3 allowed in cold")
	}
	ref := c.Ref()
	if err := e.Warm.Client().Del(ctx, e.Warm.HeaderKey(&ref)).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := w.RebuildColdFilters(ctx)
	if err != nil || n != 1 {
		t.Fatalf("rebuild: %d cells, %v; want 1", n, err)
	}
	if op := e.Check(t, tiers.Enforce, c); op.Allowed() || op.Out[0].Tier != tiers.Cold {
		t.Fatalf("after the rebuild, 4th call of 3: %+v; want denied in cold", op.Out)
	}
	// Run again: the cell is held already, its bits are not added twice.
	if n, err := w.RebuildColdFilters(ctx); err != nil || n != 1 {
		t.Fatalf("second rebuild: %d %v", n, err)
	}
}

// A cycle bounds the history it keeps: an activity row older than the
// horizon (168 hours) keeps its mean calls an hour over the horizon, and a
// younger row is left as it is.
func TestCycle_RescalesActivityOlderThanTheHorizon(t *testing.T) {
	t.Parallel()
	e, w := newWorkerEnv(t)
	ctx := context.Background()
	old, young := moveenv.NewCell(1000), moveenv.NewCell(1000)
	e.Check(t, tiers.Enforce, old)
	e.Check(t, tiers.Enforce, young)
	if _, err := w.RunCycle(ctx); err != nil { // folds the activity into cell_activity
		t.Fatal(err)
	}
	hour := e.Clock.Now().Unix() / 3600
	oldID, youngID := old.Ref().ID(), young.Ref().ID()
	for _, db := range w.DBs {
		if _, err := db.ExecContext(ctx, "UPDATE cell_activity SET since = ?, calls = 2000 WHERE k = ?", hour-200, oldID[:]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.RunCycle(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id           tiers.CellID
		since, calls int64
	}{
		{oldID, hour - 168, 2000 * 168 / 200},
		{youngID, hour, 1},
	} {
		found := false
		for _, db := range w.DBs {
			var since, calls int64
			err := db.QueryRowContext(ctx, "SELECT since, calls FROM cell_activity WHERE k = ?", tc.id[:]).Scan(&since, &calls)
			if err != nil {
				continue
			}
			found = true
			if since != tc.since || calls != tc.calls {
				t.Errorf("cell %x: since %d calls %d, want %d and %d", tc.id[:4], since, calls, tc.since, tc.calls)
			}
		}
		if !found {
			t.Errorf("cell %x: no activity row", tc.id[:4])
		}
	}
}

// A part worker that finds every part left running in its own instance
// stops instead of polling for them: the cycle then ends with its last
// part, not a poll interval later. Parts another instance runs, or not
// yet taken, are waited for.
func TestLocalParts_HoldAllOnlyWhenEveryPartLeftRunsHere(t *testing.T) {
	t.Parallel()
	l := &localParts{running: map[int]bool{}}
	done := map[string]bool{"0": true, "1": true}
	for _, tc := range []struct {
		running []int
		want    bool
	}{
		{nil, false},
		{[]int{2}, false},
		{[]int{2, 3}, true},
		{[]int{3}, false},
	} {
		l.running = map[int]bool{}
		for _, p := range tc.running {
			l.set(p, true)
		}
		if got := l.holdAll(4, done); got != tc.want {
			t.Errorf("running %v of 4, done 0 and 1: holdAll %v, want %v", tc.running, got, tc.want)
		}
	}
	l.set(2, false)
	if l.running[2] {
		t.Error("part 2 still running after set false")
	}
}

// takeParts returns, rather than polls until the cycle ends, once every
// part left is running in its own instance (held by another of its part
// workers); without that it would wait out its context here.
func TestTakeParts_StopsWhenEveryPartLeftRunsHere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	id, total := "test-"+testenv.RandomHex(4), len(w.DBs)*activity.PartsPerShard
	for p := 1; p < total; p++ {
		if err := e.mover.RDB.HSet(ctx, w.doneKey(id), strconv.Itoa(p), "{}").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Part 0 runs in this instance: its lease is another part worker's.
	if err := e.mover.RDB.Set(ctx, w.partKey(id, 0), "another-part-worker", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	local := &localParts{running: map[int]bool{0: true}}
	run := func(context.Context, int) partReport {
		t.Error("ran a part another part worker holds")
		return partReport{}
	}
	if err := w.takeParts(ctx, id, total, local, run); err != nil {
		t.Fatalf("takeParts: %v, want it to return once the part left runs here", err)
	}
}

// A cycle sizes each tag's cold filter for the cells it sends cold (its
// first pass counts them per tag), so a tag whose 48 cells go cold in
// batches of 3 over 32 parts gets one or two layers, not one a batch.
func TestCycle_SizesEachTagsColdFilterForTheCellsItSendsCold(t *testing.T) {
	t.Parallel()
	e, w := newWorkerEnv(t)
	ctx := context.Background()
	cells := moveenv.NewCells(48, 10, 1)
	for _, c := range cells {
		e.Check(t, tiers.Enforce, c)
	}
	e.Clock.Advance(2 * time.Hour)
	rep, err := w.RunCycle(ctx)
	// A cell its tag's filter holds by a false positive (the tag's earlier
	// batches set bits) takes the full protocol; the others the quiet move,
	// idle (their windows are past).
	if err != nil || rep.Moved["hot>cold"] != 48 || rep.Idle < 40 || rep.Quiet != rep.Idle {
		t.Fatalf("cycle: %+v %v, want 48 cells cold, nearly all by the quiet move as idle cells", rep, err)
	}
	ref := cells[0].Ref()
	layers, err := e.mover.RDB.GetRange(ctx, e.Warm.HeaderKey(&ref), 12, 12).Result()
	if err != nil || len(layers) != 1 {
		t.Fatalf("header: %q %v", layers, err)
	}
	if n := int(layers[0]); n < 1 || n > 2 {
		t.Fatalf("the tag's cold filter has %d layers, want 1 or 2", n)
	}
}

// pacedCycle is a worker bounded to 400 cells a second, in batches of 20,
// and 400 hot cells whose target is cold.
func pacedCycle(t *testing.T) (*env, *Worker, []moveenv.Cell) {
	t.Helper()
	e := newEnv(t).ownJournal()
	w := e.worker(Config{Schedule: "@daily", HotThreshold: 20, ColdThreshold: 2, BatchSize: 20, CellsPerSecond: 400})
	cells := rareCells(t, e, 400)
	e.Clock.Advance(2 * time.Hour)
	return e, w, cells
}

// Config.CellsPerSecond bounds the cells an instance's part workers scan:
// 400 cells at 400 a second, in batches of 20 (the limiter's burst), take
// at least (400 - 20) / 400 s; every cell is still moved, once.
func TestCycle_CellsPerSecondBoundsTheScan(t *testing.T) {
	t.Parallel()
	_, w, cells := pacedCycle(t)
	start := time.Now()
	rep, err := w.RunCycle(context.Background())
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scanned != len(cells) || rep.Moved["hot>cold"] != len(cells) {
		t.Fatalf("report %+v: want %d cells scanned and moved hot>cold", rep, len(cells))
	}
	if least := 950 * time.Millisecond; took < least {
		t.Fatalf("the cycle took %s: want at least %s at 400 cells a second", took, least)
	}
}

// A paced cycle cut short by its context's deadline leaves the parts it
// had not finished to be taken again: the cycle joined once more moves
// every cell.
func TestCycle_APacedCycleCutShortLeavesItsPartsUndone(t *testing.T) {
	t.Parallel()
	e, w, cells := pacedCycle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := w.RunCycle(ctx); err == nil {
		t.Fatal("a cycle that needs ~1 s ended without error within 300 ms")
	}
	w.Config.CellsPerSecond = 0
	if _, err := w.RunCycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, c := range cells {
		if tier := e.TierOf(t, c); tier != tiers.Cold {
			t.Fatalf("cell %d in %s after the cycle was joined again, want cold", i, tier)
		}
	}
}

// Compacting the cold filters leaves each filter with more than one layer,
// or with cells no longer cold, as one layer holding the cells that are
// cold, so that their counts hold and the cells moved out of cold since
// are mostly no longer "maybe"; a filter of one layer whose cells are all
// cold is left as it is, and so is everything on a second run. On a Redis
// Cluster too, where each tag's header is in a slot of its own.
func TestCompactColdFilters_KeepsTheColdCellsInOneLayer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  func(*testing.T) *env
	}{
		{"single Redis", func(t *testing.T) *env { return newEnv(t).ownJournal() }},
		{"Redis Cluster", newClusterEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.env(t)
			compactColdFiltersOf(t, e, e.worker(Config{Schedule: "@daily", HotThreshold: 20, ColdThreshold: 2, PromoteInterval: 10 * time.Second, DemoteInterval: time.Hour, BatchSize: 3}))
		})
	}
}

// compactColdFiltersOf is TestCompactColdFilters_KeepsTheColdCellsInOneLayer
// on e.
func compactColdFiltersOf(t *testing.T, e *env, w *Worker) {
	ctx := context.Background()
	grown := moveenv.NewCells(60, 3, 1)    // one app: moved to cold 5 at a time
	oneLayer := moveenv.NewCells(10, 3, 1) // another: in one move
	for _, c := range slices.Concat(grown, oneLayer) {
		e.Check(t, tiers.Enforce, c)
		e.Check(t, tiers.Enforce, c)
	}
	if err := w.Activity.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for batch := range slices.Chunk(grown, 5) {
		e.Move(t, tiers.Hot, tiers.Cold, batch...)
	}
	e.Move(t, tiers.Hot, tiers.Cold, oneLayer...)
	back := grown[40:] // out of cold again: their bits stay
	e.Move(t, tiers.Cold, tiers.Hot, back...)
	tags := []tiers.Tag{grown[0].Ref().Tag, oneLayer[0].Ref().Tag}
	before, err := e.Warm.ColdFilters(ctx, tags)
	if err != nil || before[0].Layers < 2 || before[1].Layers != 1 {
		t.Fatalf("filters before %+v, %v; want several layers, then one", before, err)
	}

	rep, err := w.CompactColdFilters(ctx)
	if err != nil || rep.Tags != 2 || rep.Compacted != 1 || rep.Changed != 0 || rep.CellsAfter != 40 || rep.BytesAfter >= rep.BytesBefore {
		t.Fatalf("compaction %+v, %v; want the first app's filter down to its 40 cold cells", rep, err)
	}
	after, err := e.Warm.ColdFilters(ctx, tags)
	if err != nil || after[0].Layers != 1 || after[0].Cells != 40 || after[1] != before[1] {
		t.Fatalf("filters after %+v (before %+v), %v", after, before, err)
	}
	for i, c := range slices.Concat(grown[:40], oneLayer) {
		if op := e.Check(t, tiers.Enforce, c); !op.Allowed() || op.Out[0].Tier != tiers.Cold {
			t.Fatalf("cold cell %d, 3rd call of 3: %+v; want allowed in cold", i, op.Out)
		}
		if op := e.Check(t, tiers.Enforce, c); op.Allowed() {
			t.Fatalf("cold cell %d: 4th call of 3 allowed", i)
		}
	}
	maybe, err := e.Warm.MayBeCold(ctx, moveenv.Refs(back...))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(slices.DeleteFunc(maybe, func(b bool) bool { return !b })); n > 3 {
		t.Fatalf("%d of the %d cells moved out of cold still maybe cold", n, len(back))
	}
	if rep, err := w.CompactColdFilters(ctx); err != nil || rep.Compacted != 0 || rep.Tags != 2 {
		t.Fatalf("second compaction %+v, %v; want nothing to do", rep, err)
	}
}

// A compaction of the cold filters and a cycle never run together: a
// compaction fails while a cycle runs, and a cycle due during a compaction
// waits for it to end.
func TestCompactColdFilters_NeverRunsWithACycle(t *testing.T) {
	t.Parallel()
	e, w := newWorkerEnv(t)
	ctx := context.Background()
	rdb := e.mover.RDB
	if err := rdb.Set(ctx, w.cycleKey(), "run-x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CompactColdFilters(ctx); err == nil || !strings.Contains(err.Error(), `"run-x" runs now`) {
		t.Fatalf("compaction during a cycle: %v, want it refused", err)
	}
	if v, _ := rdb.Get(ctx, w.cycleKey()).Result(); v != "run-x" {
		t.Fatalf("cycle key %q after the refused compaction", v)
	}

	if err := rdb.Set(ctx, w.cycleKey(), compactionPrefix+"x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.RunCycle(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a cycle ran during a compaction: %v", err)
	case <-time.After(3 * compactionPoll / 2):
	}
	if err := rdb.Del(ctx, w.cycleKey()).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("cycle after the compaction: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cycle did not run once the compaction ended")
	}
}

// layeredFilter moves 20 cells of one app to cold 5 at a time, their
// activity recorded: a filter of several layers for a compaction. It
// returns the app's tag and that filter.
func layeredFilter(t *testing.T, e *env, w *Worker) ([]tiers.Tag, warm.ColdFilter) {
	t.Helper()
	ctx := context.Background()
	cells := moveenv.NewCells(20, 3, 1)
	for _, c := range cells {
		e.Check(t, tiers.Enforce, c)
	}
	if err := w.Activity.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for batch := range slices.Chunk(cells, 5) {
		e.Move(t, tiers.Hot, tiers.Cold, batch...)
	}
	tag := []tiers.Tag{cells[0].Ref().Tag}
	before, err := e.Warm.ColdFilters(ctx, tag)
	if err != nil || before[0].Layers < 2 {
		t.Fatalf("filter before %+v, %v; want several layers", before, err)
	}
	return tag, before[0]
}

// A compaction stops, replacing nothing, at a row of cell_activity whose
// cell it cannot read: left out, a cold cell would lose its bits.
func TestCompactColdFilters_StopsAtARowItCannotRead(t *testing.T) {
	t.Parallel()
	e, w := newOwnWorkerEnv(t)
	ctx := context.Background()
	tag, before := layeredFilter(t, e, w)
	if _, err := w.DBs[0].ExecContext(ctx, "INSERT INTO cell_activity (k, ref, since, calls) VALUES (?, 'not a ref', 0, 1)", make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CompactColdFilters(ctx); !errors.Is(err, errUndecodable) {
		t.Fatalf("compaction over an unreadable row: %v, want it stopped", err)
	}
	if after, err := e.Warm.ColdFilters(ctx, tag); err != nil || after[0] != before {
		t.Fatalf("filter after %+v (before %+v), %v; want it unchanged", after, before, err)
	}
}

// A compaction that loses the cycle key while it scans (its renewals
// failed for a lease time and another instance took the key) replaces no
// filter, and leaves the key to its new holder. The compaction is held up
// in MariaDB (cell_activity locked by another session) while the key is
// taken from it.
func TestCompactColdFilters_ReplacesNothingOnceItLostTheCycleKey(t *testing.T) {
	t.Parallel()
	e, w := newOwnWorkerEnv(t)
	ctx := context.Background()
	tag, before := layeredFilter(t, e, w)
	lock, err := w.DBs[0].Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "LOCK TABLES cell_activity WRITE, cell_activity_log WRITE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.CompactColdFilters(ctx)
		done <- err
	}()
	rdb := e.mover.RDB
	for held := false; !held; {
		select {
		case err := <-done:
			t.Fatalf("the compaction ended before taking the cycle key: %v", err)
		case <-time.After(time.Millisecond):
		}
		v, err := rdb.Get(ctx, w.cycleKey()).Result()
		held = err == nil && strings.HasPrefix(v, compactionPrefix)
	}
	if err := rdb.Set(ctx, w.cycleKey(), "run-other", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "lost the cycle key") {
		t.Fatalf("compaction that lost the cycle key: %v, want it stopped", err)
	}
	if after, err := e.Warm.ColdFilters(ctx, tag); err != nil || after[0] != before {
		t.Fatalf("filter after %+v (before %+v), %v; want it unchanged", after, before, err)
	}
	if v, _ := rdb.Get(ctx, w.cycleKey()).Result(); v != "run-other" {
		t.Fatalf("cycle key %q after the compaction, want its new holder's", v)
	}
}
