package migrate

import (
	"bytes"
	"context"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/gcfloor"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// BenchmarkMoveCells_HotToCold moves batches of 1,000 hot cells (one call
// each) to cold by the full protocol (the cells are put in their tags'
// cold filters first, as cells moved out of cold before are; others take
// the quiet move, which BenchmarkCycle_HotToCold measures), with the cells of
// 1,000 apps (a tag each: the worst case for per-tag scripts) and of 10
// apps (how a real batch looks: a cycle scans cells in key order). It
// reports cells/s, the time of each step per batch and its Redis CPU per
// cell ("journal" includes the lease), and the CPU time per cell of this
// process and of the Redis server (its INFO cpu: only this benchmark's when
// the server is its alone, QUOTA_TEST_REDIS_ADDR).
func BenchmarkMoveCells_HotToCold(b *testing.B) {
	for _, apps := range []int{1000, 10} {
		b.Run("apps="+strconv.Itoa(apps), func(b *testing.B) { benchHotToCold(b, apps) })
	}
}

func benchHotToCold(b *testing.B, apps int) {
	e := newEnv(b)
	ctx := context.Background()
	const batch = 1000
	moved := 0
	var took time.Duration
	var last time.Time
	perStep := map[Step]time.Duration{}
	perStepRedis := map[Step]time.Duration{}
	var lastRedis time.Duration
	e.mover.Faults = afterStep(func(s Step) error {
		perStep[s] += time.Since(last)
		r := testenv.RedisCPU(b, e.mover.RDB)
		perStepRedis[s] += r - lastRedis
		lastRedis = r
		last = time.Now()
		return nil
	})
	appNames := make([]string, apps)
	for i := range appNames {
		appNames[i] = "app-" + testenv.RandomHex(4)
	}
	cpu := newCPUMeter(b)
	for b.Loop() {
		b.StopTimer()
		cells := make([]cellSpec, batch)
		for i := range cells {
			cells[i] = newCell(10)
			cells[i].app = appNames[i%apps]
		}
		ops := make([]*tiers.Op, batch)
		for i, c := range cells {
			ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.at(e.clock.Now())}}
		}
		if err := e.router.Check(ctx, e.clock.Now(), ops); err != nil {
			b.Fatal(err)
		}
		e.takeFullProtocol(b, cells...)
		cpu.start(e)
		b.StartTimer()
		start := time.Now()
		last = start
		lastRedis = cpu.redis0
		res, err := e.mover.MoveCells(ctx, refsOf(cells...), tiers.Hot, tiers.Cold)
		took += time.Since(start)
		b.StopTimer()
		cpu.stop(e)
		b.StartTimer()
		if err != nil || len(res.Moved) != batch {
			b.Fatalf("moved %d of %d: %v", len(res.Moved), batch, err)
		}
		moved += len(res.Moved)
	}
	b.ReportMetric(float64(moved)/took.Seconds(), "cells/s")
	for s := StepJournal; s <= StepDelete; s++ {
		b.ReportMetric(float64(perStep[s].Microseconds())/float64(b.N), s.String()+"-us/batch")
		b.ReportMetric(float64(perStepRedis[s].Microseconds())/float64(moved), s.String()+"-redis-us/cell")
	}
	cpu.report(moved)
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
