package analytics_test

import (
	"context"
	"database/sql"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testenv"
)

// BenchmarkRecordAndFlush is what analytics costs per call end to end in
// quotad's process: Record of calls spread like `make bench`'s uniform keys
// (1,000 apps × 100,000 users × 50 interfaces, so nearly every call is a new
// per-user row), and a Flush to real MariaDB shards and Redis every
// flushEvery calls (a 15 s flush at ~13,000 checks/s). ns/op, B/op and
// allocs/op are per recorded call, flush included.
func BenchmarkRecordAndFlush(b *testing.B) {
	const flushEvery = 200_000
	dbs := testenv.MySQLShards(b, 2)
	rdb, prefix := testenv.Redis(b)
	clk := clock.NewFake(t0)
	rec, err := analytics.New(analytics.Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	apps := names("app-", 1000)
	users := names("user-", 100_000)
	ifaces := names("iface.", 50)
	ctx := context.Background()
	var x uint64 = 88172645463325252
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// xorshift: cheap, and the same sequence every run.
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		rec.Record(apps[x%1000], ifaces[(x>>10)%50], users[(x>>20)%100_000], true)
		if (i+1)%flushEvery == 0 {
			clk.Advance(15 * time.Second)
			if err := rec.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := rec.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// BenchmarkPendingRowHeap is what a call costs in memory while MySQL cannot
// be written, which sizes QUOTA_ANALYTICS_BUFFER_MAX: b.N uniform calls
// (every one a new per-user row, as in make bench) recorded and folded into
// pending rows by flushes that fail (MySQL and Redis both unreachable), then
// the live heap after a GC, against before, over the pending rows reported.
// Run it with a large -benchtime, e.g. 200000x: the figures are heap-B/row
// (all pending rows: per-user, series and daily) and heap-B/call.
func BenchmarkPendingRowHeap(b *testing.B) {
	db, err := sql.Open("mysql", "quota:quota@tcp(127.0.0.1:1)/none?timeout=50ms")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	reg := prometheus.NewRegistry()
	rec, err := analytics.New(analytics.Options{DBs: []*sql.DB{db}, Redis: rdb, Clock: clock.NewFake(t0), Registerer: reg,
		MaxPendingRows: 10_000_000})
	if err != nil {
		b.Fatal(err)
	}
	apps, users, ifaces := names("app-", 1000), names("user-", 100_000), names("iface.", 50)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	var x uint64 = 88172645463325252
	for i := range b.N {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		rec.Record(apps[x%1000], ifaces[(x>>10)%50], users[(x>>20)%100_000], true)
		if (i+1)%50_000 == 0 {
			_ = rec.Flush(context.Background()) // fails: the rows stay pending
		}
	}
	_ = rec.Flush(context.Background())
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	rows := gauge(b, reg, "quota_analytics_pending_rows")
	if rows == 0 {
		b.Fatal("no pending rows: did the flush reach a database?")
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/rows, "heap-B/row")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-B/call")
	b.ReportMetric(rows, "rows")
	runtime.KeepAlive(rec)
}

func gauge(b *testing.B, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	b.Fatalf("no gauge %s", name)
	return 0
}
