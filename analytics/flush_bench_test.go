package analytics_test

import (
	"context"
	"database/sql"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/benchload"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// BenchmarkRecordAndFlush is what analytics costs per call end to end in
// quotad's process: Record of calls spread like `make bench`'s uniform keys
// (1,000 apps × 100,000 users × 50 interfaces, so nearly every call is a new
// per-user row), and a Flush to real MariaDB shards and Redis every
// flushEvery calls (a 15 s flush at ~13,000 checks/s). ns/op, B/op and
// allocs/op are per recorded call, flush included.
func BenchmarkRecordAndFlush(b *testing.B) { benchRecordAndFlush(b, false) }

// BenchmarkRecordAndPeriodicFlush is BenchmarkRecordAndFlush with Run's
// flushes (the minute in progress held, the interface-level users sent once
// a minute), so the adds wait in memory as they do in quotad.
func BenchmarkRecordAndPeriodicFlush(b *testing.B) { benchRecordAndFlush(b, true) }

func benchRecordAndFlush(b *testing.B, periodic bool) {
	const flushEvery = 200_000
	dbs := testenv.MySQLShards(b, 2)
	rdb, prefix := testenv.Redis(b)
	clk := clock.NewFake(t0)
	rec, err := analytics.New(analytics.Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk, HoldOpenMinute: periodic})
	if err != nil {
		b.Fatal(err)
	}
	flush := rec.Flusher.Flush
	if periodic {
		flush = func(ctx context.Context) error { return analytics.PeriodicFlush(ctx, rec.Flusher) }
	}
	load := benchload.NewUniform()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		app, iface, user := load.Next()
		rec.Recorder.Record(app, iface, user, true)
		if (i+1)%flushEvery == 0 {
			clk.Advance(15 * time.Second)
			if err := flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := rec.Flusher.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

var names = benchload.Names

// unreachableRecorder is a Recorder whose MySQL shard and Redis cannot be
// reached, so every flush fails and keeps its rows pending in memory.
func unreachableRecorder(b *testing.B) (*analytics.Analytics, *prometheus.Registry) {
	db, err := sql.Open("mysql", "quota:quota@tcp(127.0.0.1:1)/none?timeout=50ms")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	b.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	rec, err := analytics.New(analytics.Options{DBs: []*sql.DB{db}, Redis: rdb, Clock: clock.NewFake(t0), Registerer: reg,
		MaxPendingRows: 10_000_000})
	if err != nil {
		b.Fatal(err)
	}
	return rec, reg
}

// BenchmarkPendingRowHeap is what a call costs in memory while MySQL cannot
// be written, which sizes QUOTA_ANALYTICS_BUFFER_MAX: b.N uniform calls
// (every one a new per-user row, as in make bench) recorded and folded into
// pending rows by flushes that fail (MySQL and Redis both unreachable), then
// the live heap after a GC, against before, over the pending rows reported.
// Run it with a large -benchtime, e.g. 200000x: the figures are heap-B/row
// (all pending rows: per-user, series and daily) and heap-B/call.
func BenchmarkPendingRowHeap(b *testing.B) {
	rec, reg := unreachableRecorder(b)
	load := benchload.NewUniform()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := range b.N {
		app, iface, user := load.Next()
		rec.Recorder.Record(app, iface, user, true)
		if (i+1)%50_000 == 0 {
			_ = rec.Flusher.Flush(context.Background()) // fails: the rows stay pending
		}
	}
	_ = rec.Flusher.Flush(context.Background())
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

// BenchmarkPendingRowGC is what the rows held in memory cost the garbage
// collector. As in BenchmarkPendingRowHeap, uniform calls are recorded and
// folded into pending rows by flushes that fail, but each call's app,
// interface and user are new strings, as quotad's HTTP decoder makes them;
// then each op is one forced full GC with the rows live. ns/op is that GC;
// rows-GC-us/100k-rows is its time above a GC of the same heap without
// the rows (measured before recording), per 100,000 pending rows;
// objects/row and heap-B/row are the live heap objects and bytes the rows
// hold.
func BenchmarkPendingRowGC(b *testing.B) {
	const calls = 300_000
	rec, reg := unreachableRecorder(b)
	load := benchload.NewUniform()
	gcTime := func(n int) time.Duration {
		start := time.Now()
		for range n {
			runtime.GC()
		}
		return time.Since(start) / time.Duration(n)
	}
	var before, after runtime.MemStats
	runtime.GC()
	base := gcTime(20)
	runtime.ReadMemStats(&before)
	for i := range calls {
		app, iface, user := load.Next()
		rec.Recorder.Record(strings.Clone(app), strings.Clone(iface), strings.Clone(user), true)
		if (i+1)%50_000 == 0 {
			_ = rec.Flusher.Flush(context.Background()) // fails: the rows stay pending
		}
	}
	_ = rec.Flusher.Flush(context.Background())
	runtime.GC()
	runtime.ReadMemStats(&after)
	rows := gauge(b, reg, "quota_analytics_pending_rows")
	if rows == 0 {
		b.Fatal("no pending rows: did the flush reach a database?")
	}
	b.ResetTimer()
	for range b.N {
		runtime.GC()
	}
	b.StopTimer()
	perGC := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(perGC-base)/1e3/rows*1e5, "rows-GC-us/100k-rows")
	b.ReportMetric(float64(after.HeapObjects-before.HeapObjects)/rows, "objects/row")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/rows, "heap-B/row")
	b.ReportMetric(rows, "rows")
	runtime.KeepAlive(rec)
}

// BenchmarkUserDayFromChunks is one user's stats query on a day whose
// per-user figures are in chunks: 16 hours at 15 s flushes, merged by
// Rollup every 40 flushes (its 10-minute schedule), each flush holding
// callsPerFlush calls of users spread over 100,000 and 10 interfaces. The
// day is built once. today: the query while the day runs (a query reads
// one batch's chunks of its user's part per batch); sealed: the same day
// once it is over and Rollup has sealed it into one batch (userseal.go),
// whose part's chunks the query decodes. It reports the chunks and the
// distinct batches the day's queries choose from besides ns/op.
func BenchmarkUserDayFromChunks(b *testing.B) {
	const flushes, callsPerFlush = 16 * 240, 300
	dbs := testenv.MySQLShards(b, 1)
	rdb, prefix := testenv.Redis(b)
	clk := clock.NewFake(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
	rec, err := analytics.New(analytics.Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	users, ifaces := names("user-", 100_000), names("iface.", 10)
	x := benchload.NewXorshift()
	for f := range flushes {
		for range callsPerFlush {
			v := x.Next()
			rec.Recorder.Record("app", ifaces[v%10], users[(v>>8)%100_000], true)
		}
		clk.Advance(15 * time.Second)
		if err := rec.Flusher.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if (f+1)%40 == 0 {
			if _, err := rec.Rollup.Run(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	day := analytics.DayOf(clk.Now())
	// count is the query of the chunks and batches the day's queries
	// choose from.
	query := func(b *testing.B, count string) {
		var chunks, batches int
		if err := dbs[0].QueryRow(count).Scan(&chunks, &batches); err != nil {
			b.Fatal(err)
		}
		i := 0
		for b.Loop() {
			if _, err := rec.Stats.UserDay(ctx, "app", users[i%100_000], day); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(chunks), "chunks-in-day")
		b.ReportMetric(float64(batches), "batches-in-day")
	}
	b.Run("today", func(b *testing.B) { query(b, "SELECT COUNT(*), COUNT(DISTINCT batch_id) FROM usage_user_chunks") })
	sealed := false
	b.Run("sealed", func(b *testing.B) {
		if !sealed { // once, though -count runs this again
			clk.Advance(24 * time.Hour)
			if res, err := rec.Rollup.Run(ctx); err != nil || res.SealedDays != 1 {
				b.Fatalf("rollup sealed %d days, want 1: %v", res.SealedDays, err)
			}
			sealed = true
		}
		// A sealed day is one batch (usage_user_sealed has no batch_id).
		query(b, "SELECT COUNT(*), 1 FROM usage_user_sealed")
	})
}
