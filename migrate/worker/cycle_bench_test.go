package worker

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/benchcpu"
	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/routing"
)

// BenchmarkCycle_HotToCold runs whole scheduled cycles over 20,000 hot
// cells of 100 apps, each called once two hours before (so every one's
// target is cold), with 1, 2 and 4 part workers: the cycle's own pace,
// with its activity fold, its scans in key order, its filter probes and
// the cold lookups they ask for, which BenchmarkMoveCells leaves out. It
// reports cells moved a second of the cycle and the CPU a cell of this
// process, Redis and MariaDB. "idle": windows of two hours (the shortest
// the cycle tracks by default), so no counter of the current window is
// left and the cells take the quiet move as idle cells (migrate/PROTOCOL.md,
// "Quiet cells"); "idle-folded": the same with the activity log folded
// before the cycle (as FoldLongLogs does between cycles), so the cycle
// scans and moves only; "counting": windows of a day, whose counters still
// hold the call, so every cell takes the quiet move with its count;
// "idle-serving": idle cells while 2,000 checks a second of other, hot
// cells go through the router of the same process, whose p99 it reports
// (what a cycle costs the checks).
func BenchmarkCycle_HotToCold(b *testing.B) {
	for _, tc := range []struct {
		name    string
		window  time.Duration
		folded  bool
		serve   bool
		workers []int
		perSec  float64 // Config.CellsPerSecond
	}{
		{"idle", 2 * time.Hour, false, false, []int{1, 2, 4}, 0},
		{"idle-folded", 2 * time.Hour, true, false, []int{2, 4}, 0},
		{"idle-serving", 2 * time.Hour, false, true, []int{2, 4}, 0},
		{"idle-serving-10000-a-second", 2 * time.Hour, false, true, []int{4}, 10000},
		{"counting", 24 * time.Hour, false, false, []int{2, 4}, 0},
		{"counting-folded", 24 * time.Hour, true, false, []int{4}, 0},
	} {
		for _, workers := range tc.workers {
			b.Run(tc.name+"/part-workers="+strconv.Itoa(workers), func(b *testing.B) {
				benchCycle(b, cycleBench{window: tc.window, folded: tc.folded, serve: tc.serve, workers: workers, perSec: tc.perSec})
			})
		}
	}
}

// cycleBench is one case of BenchmarkCycle_HotToCold.
type cycleBench struct {
	window  time.Duration // of the cells moved
	folded  bool          // the activity log folded before the cycle
	serve   bool          // checks of other cells during the cycle
	workers int           // part workers
	perSec  float64       // Config.CellsPerSecond
}

// servingRouter is a router over e's tiers that records no activity, so
// that the cells it serves stay out of the cycle it runs beside.
func servingRouter(e *env) *routing.Router { return routing.NewRouter(e.Router.Hot(), e.Warm, e.Cold) }

// hotCells makes 1,000 hot cells, each counted once through r, for
// serveChecks.
func hotCells(b *testing.B, e *env, r *routing.Router) []tiers.Cell {
	cells := make([]tiers.Cell, 1000)
	ops := make([]*tiers.Op, len(cells))
	for i := range cells {
		c := moveenv.NewCell(1 << 40)
		c.Window = 24 * time.Hour
		cells[i] = c.At(e.Clock.Now())
		ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{cells[i]}}
	}
	if err := r.Check(context.Background(), e.Clock.Now(), ops); err != nil {
		b.Fatal(err)
	}
	return cells
}

// serveChecks sends a check of one of cells every 500 µs (2,000 a second,
// open loop) through r until stop is closed, and returns each check's
// latency from the moment it was due (a check sent late because the one
// before was slow counts its wait).
func serveChecks(b *testing.B, e *env, r *routing.Router, cells []tiers.Cell, stop <-chan struct{}) []time.Duration {
	ctx := context.Background()
	var lat []time.Duration
	due := time.Now()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return lat
		default:
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		op := &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{cells[i%len(cells)]}}
		if err := r.Check(ctx, e.Clock.Now(), []*tiers.Op{op}); err != nil {
			b.Error(err)
			return lat
		}
		lat = append(lat, time.Since(due))
		due = due.Add(500 * time.Microsecond)
	}
}

func benchCycle(b *testing.B, cb cycleBench) {
	window, folded, workers := cb.window, cb.folded, cb.workers
	// 200 cells an app. QUOTA_BENCH_CYCLE_CELLS sets the cycle's cells, in
	// thousands: with the default 20,000 the costs of the cycle's 32 parts
	// themselves are a visible share, as they are not in a real cycle.
	cells := 20000
	if n, err := strconv.Atoi(os.Getenv("QUOTA_BENCH_CYCLE_CELLS")); err == nil && n >= 1000 {
		cells = n / 1000 * 1000
	}
	apps := cells / 200
	ctx := context.Background()
	var took time.Duration
	cpu := benchcpu.New(b)
	moved := 0
	var lat []time.Duration // of the checks served during the cycles
	for b.Loop() {
		b.StopTimer()
		e := newEnv(b)
		w := e.worker(Config{Schedule: "@daily", HotThreshold: 20, ColdThreshold: 2, PromoteInterval: 10 * time.Second,
			DemoteInterval: time.Hour, BatchSize: 1000, PartWorkers: workers, CellsPerSecond: cb.perSec})
		appNames := make([]string, apps)
		for i := range appNames {
			appNames[i] = "app-" + testenv.RandomHex(4)
		}
		for n := 0; n < cells; n += 1000 {
			ops := make([]*tiers.Op, 1000)
			for i := range ops {
				c := moveenv.NewCell(10)
				c.App, c.Window = appNames[(n+i)%apps], window
				ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.At(e.Clock.Now())}}
			}
			if err := e.Router.Check(ctx, e.Clock.Now(), ops); err != nil {
				b.Fatal(err)
			}
		}
		e.Clock.Advance(2 * time.Hour)
		if folded {
			if err := w.Activity.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			for _, db := range w.DBs {
				for part := range activity.PartsPerShard {
					if _, err := activity.FoldLog(ctx, db, part); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		stop := make(chan struct{})
		served := make(chan []time.Duration, 1)
		if cb.serve {
			r := servingRouter(e)
			hot := hotCells(b, e, r)
			go func() { served <- serveChecks(b, e, r, hot, stop) }()
		}
		cpu.Start(e.mover.RDB)
		b.StartTimer()
		start := time.Now()
		rep, err := w.RunCycle(ctx)
		took += time.Since(start)
		b.StopTimer()
		cpu.Stop(e.mover.RDB)
		close(stop)
		if cb.serve {
			lat = append(lat, <-served...)
		}
		b.StartTimer()
		if err != nil || rep.Moved["hot>cold"] != cells {
			b.Fatalf("cycle moved %v of %d cells: %v %v", rep.Moved, cells, err, rep.Errors)
		}
		moved += rep.Moved["hot>cold"]
	}
	b.ReportMetric(float64(moved)/took.Seconds(), "cells/s")
	cpu.Report(moved)
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "check-p99-ms")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "check-p50-ms")
	}
}

// BenchmarkCompactColdFilters times CompactColdFilters over the cells of
// a cycle moved to cold (as BenchmarkCycle_HotToCold's idle cells: 200 an
// app, QUOTA_BENCH_CYCLE_CELLS of them), a quarter of each app's moved out
// of cold again, and reports the cells of cell_activity it reads a second
// and the false "may be cold" share of new cells before and after.
func BenchmarkCompactColdFilters(b *testing.B) {
	cells := 20000
	if n, err := strconv.Atoi(os.Getenv("QUOTA_BENCH_CYCLE_CELLS")); err == nil && n >= 1000 {
		cells = n / 1000 * 1000
	}
	ctx := context.Background()
	var took time.Duration
	var fpBefore, fpAfter, outBefore, outAfter float64
	for b.Loop() {
		b.StopTimer()
		e := newEnv(b)
		w := e.worker(Config{Schedule: "@daily", HotThreshold: 20, ColdThreshold: 2, PromoteInterval: 10 * time.Second,
			DemoteInterval: time.Hour, BatchSize: 1000, PartWorkers: 4})
		specs := moveenv.NewCells(cells, 10, cells/200)
		for batch := range slices.Chunk(specs, 1000) {
			ops := make([]*tiers.Op, len(batch))
			for i, c := range batch {
				c.Window = 2 * time.Hour
				batch[i] = c
				ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.At(e.Clock.Now())}}
			}
			if err := e.Router.Check(ctx, e.Clock.Now(), ops); err != nil {
				b.Fatal(err)
			}
		}
		e.Clock.Advance(2 * time.Hour)
		if rep, err := w.RunCycle(ctx); err != nil || rep.Moved["hot>cold"] != cells {
			b.Fatalf("cycle moved %v of %d cells: %v", rep.Moved, cells, err)
		}
		var back []moveenv.Cell // a quarter of each app's cells (newCells deals them out)
		for i, c := range specs {
			if i/(cells/200)%4 == 0 {
				back = append(back, c)
			}
		}
		for batch := range slices.Chunk(back, 1000) {
			e.Move(b, tiers.Cold, tiers.Hot, batch...)
		}
		fpBefore += newCellsMaybeCold(b, e, specs)
		outBefore += maybeCold(b, e, moveenv.Refs(back...))
		b.StartTimer()
		start := time.Now()
		rep, err := w.CompactColdFilters(ctx)
		took += time.Since(start)
		b.StopTimer()
		if err != nil || rep.Compacted != cells/200 || rep.CellsAfter != cells-len(back) {
			b.Fatalf("compaction %+v, %v", rep, err)
		}
		fpAfter += newCellsMaybeCold(b, e, specs)
		outAfter += maybeCold(b, e, moveenv.Refs(back...))
		b.StartTimer()
	}
	b.ReportMetric(float64(cells*b.N)/took.Seconds(), "activity-cells/s")
	b.ReportMetric(outBefore/float64(b.N), "moved-out-maybe-before")
	b.ReportMetric(outAfter/float64(b.N), "moved-out-maybe-after")
	b.ReportMetric(fpBefore/float64(b.N), "new-maybe-before")
	b.ReportMetric(fpAfter/float64(b.N), "new-maybe-after")
}

// newCellsMaybeCold returns the share of 10,000 cells never seen, of the
// apps of specs, that their filters answer "may be cold".
func newCellsMaybeCold(b *testing.B, e *env, specs []moveenv.Cell) float64 {
	refs := make([]tiers.Ref, 10000)
	for i := range refs {
		c := moveenv.NewCell(10)
		c.App, c.Window = specs[i%len(specs)].App, 2*time.Hour
		refs[i] = c.Ref()
	}
	return maybeCold(b, e, refs)
}

// maybeCold returns the share of refs that their filters answer "may be
// cold".
func maybeCold(b *testing.B, e *env, refs []tiers.Ref) float64 {
	maybe, err := e.Warm.MayBeCold(context.Background(), refs)
	if err != nil {
		b.Fatal(err)
	}
	return float64(len(slices.DeleteFunc(maybe, func(m bool) bool { return !m }))) / float64(len(refs))
}
