// Package benchcpu is test support: what a benchmark of moves between
// tiers (migrate's and migrate/worker's) measures beside its time, the CPU
// of this process, of the Redis server and of a local MariaDB, and the
// bytes allocated and Redis commands run, per cell.
package benchcpu

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/gcfloor"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// Meter sums the CPU time this process, a Redis server and
// a local MariaDB spend between its starts and stops, and two measures of
// work that do not vary with the machine's speed, as CPU time does on a
// shared machine: the bytes this process allocates and the commands Redis
// runs (the commands scripts call included).
type Meter struct {
	b                        *testing.B
	mysqld                   int
	self0, redis0, mysql0    time.Duration
	self, redisCPU, mysqlCPU time.Duration
	alloc0, cmds0            int64
	alloc, cmds              int64
	floorMB                  int // the Go heap floor in force
}

// New starts, until b's end, the Go heap floor quotad runs with
// by default (config.Defaults, internal/gcfloor), so that this process
// collects as often as quotad would for the same work;
// QUOTA_BENCH_GC_HEAP_FLOOR_MB sets another (0: GOGC alone).
func New(b *testing.B) *Meter {
	mb := config.Defaults().GCHeapFloorMB
	if v := os.Getenv("QUOTA_BENCH_GC_HEAP_FLOOR_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("QUOTA_BENCH_GC_HEAP_FLOOR_MB %q: want a number of MiB >= 0", v)
		}
		mb = n
	}
	b.Cleanup(gcfloor.Start(uint64(mb) << 20).Stop)
	return &Meter{b: b, mysqld: mysqldPID(), floorMB: mb}
}

// Start starts a measure of the work of this process, rdb's server and
// MariaDB.
func (c *Meter) Start(rdb redis.UniversalClient) {
	c.self0, c.redis0, c.mysql0 = testenv.SelfCPU(c.b), testenv.RedisCPU(c.b, rdb), procCPU(c.mysqld)
	c.alloc0, c.cmds0 = allocatedBytes(), testenv.RedisCommands(c.b, rdb)
}

// RedisAtStart is the Redis server's CPU time the last Start read.
func (c *Meter) RedisAtStart() time.Duration { return c.redis0 }

// Stop adds the work since Start to the sums.
func (c *Meter) Stop(rdb redis.UniversalClient) {
	c.self += testenv.SelfCPU(c.b) - c.self0
	c.redisCPU += testenv.RedisCPU(c.b, rdb) - c.redis0
	c.mysqlCPU += procCPU(c.mysqld) - c.mysql0
	c.alloc += allocatedBytes() - c.alloc0
	// Less the two INFOs since the count before: that count's own (a
	// command counts once it has run) and the CPU read above.
	c.cmds += testenv.RedisCommands(c.b, rdb) - c.cmds0 - 2
}

// Report reports the CPU and work a cell of n cells.
func (c *Meter) Report(n int) {
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

// procCPU is the user and system CPU time of process pid (0 for pid 0, or
// when /proc does not tell).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	d, _ := testenv.ProcessCPUTime(pid)
	return d
}
