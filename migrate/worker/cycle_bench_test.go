package worker

import (
	"bytes"
	"context"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/gcfloor"
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
func servingRouter(e *env) *routing.Router { return routing.NewRouter(e.router.Hot(), e.warm, e.cold) }

// hotCells makes 1,000 hot cells, each counted once through r, for
// serveChecks.
func hotCells(b *testing.B, e *env, r *routing.Router) []tiers.Cell {
	cells := make([]tiers.Cell, 1000)
	ops := make([]*tiers.Op, len(cells))
	for i := range cells {
		c := newCell(1 << 40)
		c.window = 24 * time.Hour
		cells[i] = c.at(e.clock.Now())
		ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{cells[i]}}
	}
	if err := r.Check(context.Background(), e.clock.Now(), ops); err != nil {
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
		if err := r.Check(ctx, e.clock.Now(), []*tiers.Op{op}); err != nil {
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
	cpu := newCPUMeter(b)
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
				c := newCell(10)
				c.app, c.window = appNames[(n+i)%apps], window
				ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.at(e.clock.Now())}}
			}
			if err := e.router.Check(ctx, e.clock.Now(), ops); err != nil {
				b.Fatal(err)
			}
		}
		e.clock.Advance(2 * time.Hour)
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
		cpu.start(e)
		b.StartTimer()
		start := time.Now()
		rep, err := w.RunCycle(ctx)
		took += time.Since(start)
		b.StopTimer()
		cpu.stop(e)
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
	cpu.report(moved)
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
		specs := newCells(cells, 10, cells/200)
		for batch := range slices.Chunk(specs, 1000) {
			ops := make([]*tiers.Op, len(batch))
			for i, c := range batch {
				c.window = 2 * time.Hour
				batch[i] = c
				ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.at(e.clock.Now())}}
			}
			if err := e.router.Check(ctx, e.clock.Now(), ops); err != nil {
				b.Fatal(err)
			}
		}
		e.clock.Advance(2 * time.Hour)
		if rep, err := w.RunCycle(ctx); err != nil || rep.Moved["hot>cold"] != cells {
			b.Fatalf("cycle moved %v of %d cells: %v", rep.Moved, cells, err)
		}
		var back []cellSpec // a quarter of each app's cells (newCells deals them out)
		for i, c := range specs {
			if i/(cells/200)%4 == 0 {
				back = append(back, c)
			}
		}
		for batch := range slices.Chunk(back, 1000) {
			e.move(b, tiers.Cold, tiers.Hot, batch...)
		}
		fpBefore += newCellsMaybeCold(b, e, specs)
		outBefore += maybeCold(b, e, refsOf(back...))
		b.StartTimer()
		start := time.Now()
		rep, err := w.CompactColdFilters(ctx)
		took += time.Since(start)
		b.StopTimer()
		if err != nil || rep.Compacted != cells/200 || rep.CellsAfter != cells-len(back) {
			b.Fatalf("compaction %+v, %v", rep, err)
		}
		fpAfter += newCellsMaybeCold(b, e, specs)
		outAfter += maybeCold(b, e, refsOf(back...))
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
func newCellsMaybeCold(b *testing.B, e *env, specs []cellSpec) float64 {
	refs := make([]tiers.Ref, 10000)
	for i := range refs {
		c := newCell(10)
		c.app, c.window = specs[i%len(specs)].app, 2*time.Hour
		refs[i] = c.ref()
	}
	return maybeCold(b, e, refs)
}

// maybeCold returns the share of refs that their filters answer "may be
// cold".
func maybeCold(b *testing.B, e *env, refs []tiers.Ref) float64 {
	maybe, err := e.warm.MayBeCold(context.Background(), refs)
	if err != nil {
		b.Fatal(err)
	}
	return float64(len(slices.DeleteFunc(maybe, func(m bool) bool { return !m }))) / float64(len(refs))
}

// cpuMeter sums the CPU time this process, the Redis server of an env and
// a local MariaDB spend between its starts and stops, and two measures of
// work that do not vary with the machine's speed, as CPU time does on a
// shared machine: the bytes this process allocates and the commands Redis
// runs (the commands scripts call included).
type cpuMeter struct {
	b                        *testing.B
	mysqld                   int
	self0, redis0, mysql0    time.Duration
	self, redisCPU, mysqlCPU time.Duration
	alloc0, cmds0            int64
	alloc, cmds              int64
	floorMB                  int // the Go heap floor in force
}

// newCPUMeter starts, until b's end, the Go heap floor quotad runs with
// by default (config.Defaults, internal/gcfloor), so that this process
// collects as often as quotad would for the same work;
// QUOTA_BENCH_GC_HEAP_FLOOR_MB sets another (0: GOGC alone).
func newCPUMeter(b *testing.B) *cpuMeter {
	mb := config.Defaults().GCHeapFloorMB
	if v := os.Getenv("QUOTA_BENCH_GC_HEAP_FLOOR_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("QUOTA_BENCH_GC_HEAP_FLOOR_MB %q: want a number of MiB >= 0", v)
		}
		mb = n
	}
	b.Cleanup(gcfloor.Start(uint64(mb) << 20).Stop)
	return &cpuMeter{b: b, mysqld: mysqldPID(), floorMB: mb}
}

func (c *cpuMeter) start(e *env) {
	c.self0, c.redis0, c.mysql0 = selfCPU(), testenv.RedisCPU(c.b, e.mover.RDB), procCPU(c.mysqld)
	c.alloc0, c.cmds0 = allocatedBytes(), testenv.RedisCommands(c.b, e.mover.RDB)
}

func (c *cpuMeter) stop(e *env) {
	c.self += selfCPU() - c.self0
	c.redisCPU += testenv.RedisCPU(c.b, e.mover.RDB) - c.redis0
	c.mysqlCPU += procCPU(c.mysqld) - c.mysql0
	c.alloc += allocatedBytes() - c.alloc0
	// Less the two INFOs since the count before: that count's own (a
	// command counts once it has run) and the CPU read above.
	c.cmds += testenv.RedisCommands(c.b, e.mover.RDB) - c.cmds0 - 2
}

// report reports the CPU and work a cell of n cells.
func (c *cpuMeter) report(n int) {
	c.b.ReportMetric(float64(c.self.Microseconds())/float64(n), "go-cpu-us/cell")
	c.b.ReportMetric(float64(c.redisCPU.Microseconds())/float64(n), "redis-cpu-us/cell")
	if c.mysqld > 0 {
		c.b.ReportMetric(float64(c.mysqlCPU.Microseconds())/float64(n), "mysql-cpu-us/cell")
	}
	c.b.ReportMetric(float64(c.alloc)/float64(n), "go-alloc-B/cell")
	c.b.ReportMetric(float64(c.cmds)/float64(n), "redis-cmds/cell")
	c.b.ReportMetric(float64(c.floorMB), "heap-floor-MiB")
}

// allocatedBytes is what this process has allocated on the heap so far.
func allocatedBytes() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// mysqldPID is the process id of a MariaDB or MySQL server on this machine
// (0 if none is found): its CPU time is read from /proc, which counts in
// ticks of 10 ms, so only a sum over many batches is worth reporting.
func mysqldPID() int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + d.Name() + "/comm")
		if name := strings.TrimSpace(string(comm)); name == "mariadbd" || name == "mysqld" {
			return pid
		}
	}
	return 0
}

// procCPU is the user and system CPU time of process pid (0 for pid 0).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
