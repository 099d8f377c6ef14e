package analytics

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/benchload"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// BenchmarkFlushServerCPU is what the flushes of one minute of make
// bench's uniform load cost MariaDB and Redis: 16,000 calls a second
// (960,000 a minute) over 1,000 apps × 50 interfaces × 100,000 users,
// flushed as quotad's Run does with the defaults: every 15 s, the minute in
// progress held, so each minute takes four flushes of per-user chunks and
// one write of its 50,000 (app, interface) pairs' day and curve rows. One
// op is one minute (after one unmeasured minute, which creates the day rows
// that the later ones update).
//
// The servers are private (testenv.StartMariaDB with two shard databases
// on it, testenv.StartRedis for the distinct-user HyperLogLogs), so their
// CPU from /proc is the flushes' alone, background threads included: a
// figure that other load on the machine hardly moves, unlike req/s.
// recorder-us/call is this process's CPU a call: Record, the flushes and
// the collector, with the load's loop. MariaDB runs with two InnoDB buffer
// pools: 32 MB, far smaller than the tables as they grow (pages are evicted
// and written back as the flushes go), and 128 MB, MariaDB's default, which
// holds them.
//
// Reported: mariadb-ms/minute and -us/call, redis-ms/minute and -us/call,
// recorder-us/call, and per minute the rows written to each table
// (usage_series, usage_daily, usage_user_chunks) and the MB of chunk
// bodies. Run with make bench-analytics-servers.
func BenchmarkFlushServerCPU(b *testing.B) {
	for _, pool := range []string{"32M", "128M"} {
		b.Run("pool="+pool, func(b *testing.B) { benchFlushServerCPU(b, pool) })
	}
}

func benchFlushServerCPU(b *testing.B, pool string) {
	const (
		perSecond = 16_000
		flushes   = 4 // a minute's flushes at 15 s
		perFlush  = perSecond * 60 / flushes
	)
	srv := testenv.StartMariaDB(b, "--innodb-buffer-pool-size="+pool)
	var dbs []*sql.DB
	for _, name := range []string{"quota_0", "quota_1"} {
		dbs = append(dbs, srv.Shard(b, name))
	}
	rs := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	b.Cleanup(func() { rdb.Close() })
	const prefix = "bench:"
	clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	rec, err := New(Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk, HoldOpenMinute: true, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	load := benchload.NewUniform()
	ctx := context.Background()
	minute := func() {
		for range flushes {
			for range perFlush {
				app, iface, user := load.Next()
				rec.Recorder.Record(app, iface, user, true)
			}
			clk.Advance(15 * time.Second)
			if err := rec.Flusher.flush(ctx, false, nil, rec.Flusher.periodicHold()); err != nil {
				b.Fatal(err)
			}
		}
	}
	minute()
	rows := func(table string) float64 {
		return testutil.ToFloat64(rec.Flusher.met.rowsWritten.WithLabelValues(table))
	}
	tables := []string{"usage_series", "usage_daily", "usage_user_chunks"}
	before := map[string]float64{}
	for _, t := range tables {
		before[t] = rows(t)
	}
	chunkBytes0 := chunkBytes(b, dbs)
	cpu0, redis0, own0 := srv.CPUTime(), rs.CPUTime(), testenv.SelfCPU(b)
	cmds0, stmts0 := redisCommands(b, rdb), mysqlStatements(b, dbs[0])
	b.ResetTimer()
	for range b.N {
		minute()
	}
	b.StopTimer()
	time.Sleep(time.Second) // the commits' background work (purge, page flushing) starts at once
	own := testenv.SelfCPU(b) - own0
	cpu, redisCPU := srv.CPUTime()-cpu0, rs.CPUTime()-redis0
	calls := float64(b.N * flushes * perFlush)
	b.ReportMetric((redisCommands(b, rdb)-cmds0)/float64(b.N), "redis-cmds/minute")
	b.ReportMetric((mysqlStatements(b, dbs[0])-stmts0)/float64(b.N), "mysql-stmts/minute")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "mariadb-ms/minute")
	b.ReportMetric(float64(cpu.Microseconds())/calls, "mariadb-us/call")
	b.ReportMetric(float64(redisCPU.Milliseconds())/float64(b.N), "redis-ms/minute")
	b.ReportMetric(float64(redisCPU.Microseconds())/calls, "redis-us/call")
	b.ReportMetric(float64(own.Microseconds())/calls, "recorder-us/call")
	for _, t := range tables {
		b.ReportMetric((rows(t)-before[t])/float64(b.N), t+"-rows/minute")
	}
	b.ReportMetric(float64(chunkBytes(b, dbs)-chunkBytes0)/1e6/float64(b.N), "chunk-MB/minute")
}

// chunkBytes is the bytes of every per-user chunk body on the shards.
func chunkBytes(b *testing.B, dbs []*sql.DB) int64 {
	var total int64
	for _, db := range dbs {
		var n sql.NullInt64
		if err := db.QueryRow("SELECT SUM(LENGTH(body)) FROM usage_user_chunks").Scan(&n); err != nil {
			b.Fatal(err)
		}
		total += n.Int64
	}
	return total
}

// redisCommands is the commands the Redis server has processed.
func redisCommands(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	b.Fatal("no total_commands_processed")
	return 0
}

// mysqlStatements is the statements the MariaDB server has run for
// clients (Questions: its whole server, both shards).
func mysqlStatements(b *testing.B, db *sql.DB) float64 {
	var name string
	var n float64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		b.Fatal(err)
	}
	return n
}
