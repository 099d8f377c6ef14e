package userdays

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/benchload"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// BenchmarkSealDay is the end-of-day seal (Seal) of one app's
// day: 24 hours of 15 s flushes (5,760), each of dayBenchCallsPerFlush calls
// of users spread over dayBenchUsers and 2 interfaces (so the day has ~100,000
// distinct (user, interface)), the flushes' chunks written as a flush
// writes them and merged as Rollup merges them (Merge) every 40 flushes
// (its 10-minute schedule). The day is built once; each op restores its chunks from a
// copy (untimed) and seals them into an empty usage_user_sealed, flat out
// (FlushDuty 1: the seal's rests are not measured). It reports the
// entries sealed (one per (user, interface) of the day) per op and per
// second, the chunks, batches and entries the seal read,
// and the longest and the total of the merges while the day was built
// (its merges hold the app's chunks locked: a flush of the app waits).
// The MariaDB is private (testenv.StartMariaDB), so its CPU from /proc is
// the seal's alone, each op's counted until mergeBenchSettleTime after the
// seal returns (InnoDB's purge); reported per entry, with this process's
// (quotad-us: the seal and its garbage collection). (Until 224eed5 it
// measured the fold into usage_user_daily that the seal replaced, as
// BenchmarkFoldDay, per row.)
func BenchmarkSealDay(b *testing.B) {
	srv := testenv.StartMariaDB(b)
	db := srv.Shard(b, "quota_0")
	u := newTestStore()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	start := t0Day
	maxRollup, allRollups := buildBenchDay(b, u, conn, start)
	chunks, batches, read := dayBenchCount(b, db)
	for _, q := range []string{
		"CREATE TABLE bench_day_chunks LIKE usage_user_chunks",
		"INSERT INTO bench_day_chunks SELECT * FROM usage_user_chunks",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	var cpu opCPU
	for b.Loop() {
		b.StopTimer()
		for _, q := range []string{
			"TRUNCATE TABLE usage_user_sealed",
			"DELETE FROM usage_user_chunks",
			"INSERT INTO usage_user_chunks SELECT * FROM bench_day_chunks",
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				b.Fatalf("%s: %v", q, err)
			}
		}
		cpu.measure(b, srv, func() {
			if sealed, err := u.Seal(ctx, conn, start+1); err != nil || sealed != 1 {
				b.Fatalf("%d (day, app) sealed, want 1: %v", sealed, err)
			}
		})
		b.StartTimer()
	}
	var entries int64
	if err := db.QueryRow("SELECT SUM(entries) FROM usage_user_sealed").Scan(&entries); err != nil {
		b.Fatal(err)
	}
	perOp := b.Elapsed().Seconds() / float64(b.N)
	n := float64(b.N) * float64(entries)
	b.ReportMetric(float64(entries), "entries/op")
	b.ReportMetric(float64(entries)/perOp, "entries/s")
	cpu.report(b, n, "entry")
	b.ReportMetric(float64(read), "entries-read/op")
	b.ReportMetric(float64(chunks), "chunks-in-day")
	b.ReportMetric(float64(batches), "batches-in-day")
	b.ReportMetric(float64(maxRollup.Microseconds())/1e3, "max-rollup-ms")
	b.ReportMetric(allRollups.Seconds(), "rollups-s/day")
}

const (
	dayBenchFlushes       = 24 * 240 // a day of 15 s flushes
	dayBenchCallsPerFlush = 300
	dayBenchUsers         = 50_000
	dayBenchRollupEvery   = 40 // the 10-minute rollup
)

// buildBenchDay writes a day of flush chunks of app "app" as the flushes
// would (Chunks, insertChunks: one batch per flush; a rollup period's
// flushes share a transaction, which leaves the same rows), with the
// Rollup's merge of today's chunks (Merge) after every dayBenchRollupEvery
// flushes. It returns the longest merge and their sum.
func buildBenchDay(b *testing.B, u *Store, conn *sql.Conn, day usage.Day) (longest, total time.Duration) {
	ctx := context.Background()
	users, ifaces := make([]string, dayBenchUsers), []string{"iface.0", "iface.1"}
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	clk := clock.NewFake(day.Time())
	x := benchload.NewXorshift()
	for f := 0; f < dayBenchFlushes; f += dayBenchRollupEvery {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range dayBenchRollupEvery {
			writeFlushBatch(b, u, tx, day, "app", dayBenchCallsPerFlush, func() (string, string) {
				v := x.Next()
				return ifaces[v&1], users[(v>>8)%dayBenchUsers]
			})
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		clk.Advance(dayBenchRollupEvery * 15 * time.Second)
		if usage.DayOf(clk.Now()) != day {
			break // the last period's rollup would seal the day
		}
		began := time.Now()
		if _, err := u.Merge(ctx, conn, day); err != nil {
			b.Fatal(err)
		}
		longest = max(longest, time.Since(began))
		total += time.Since(began)
	}
	return longest, total
}

// dayBenchCount is the chunks, batches and entries (before the seal sums
// them) of the day built.
func dayBenchCount(b *testing.B, db *sql.DB) (chunks, batches, entries int64) {
	if err := db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT batch_id), SUM(entries) FROM usage_user_chunks").Scan(&chunks, &batches, &entries); err != nil {
		b.Fatal(err)
	}
	return chunks, batches, entries
}
