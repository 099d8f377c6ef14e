package analytics

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testenv"
)

// BenchmarkUserStorage (EVALUATION ONLY, issue 34) is BenchmarkFlushServerCPU's
// load (16,000 calls/s of make bench's uniform keys, 15 s flushes, the
// minute in progress held) written with the per-user figures as chunks
// (store=chunks, what quotad does) or as one row per (day, app, user) with
// its interface map (store=rows). One op is one minute. Reported per 1,000
// calls: MariaDB's CPU, statements (Questions), the user table's rows and
// statements, the bytes MariaDB received and InnoDB wrote (data files and
// redo log).
func BenchmarkUserStorage(b *testing.B) {
	for _, store := range []string{"chunks", "rows"} {
		b.Run("store="+store, func(b *testing.B) { benchUserStorage(b, store == "rows") })
	}
}

func benchUserStorage(b *testing.B, rows bool) {
	const (
		perSecond = 16_000
		flushes   = 4
		perFlush  = perSecond * 60 / flushes
	)
	srv := testenv.StartMariaDB(b)
	var dbs []*sql.DB
	for _, name := range []string{"quota_0", "quota_1"} {
		db := privateShard(b, srv, name)
		if _, err := db.Exec(userDaysDDL); err != nil {
			b.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	rs := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	b.Cleanup(func() { rdb.Close() })
	clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	a, err := New(Options{DBs: dbs, Redis: rdb, KeyPrefix: "bench:", Clock: clk, HoldOpenMinute: true, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	a.Flusher.users.perUserRows = rows
	load := newUniformLoad()
	ctx := context.Background()
	minute := func() {
		for range flushes {
			for range perFlush {
				app, iface, user := load.Next()
				a.Recorder.Record(app, iface, user, true)
			}
			clk.Advance(15 * time.Second)
			if err := a.Flusher.flush(ctx, false, nil, a.Flusher.periodicHold()); err != nil {
				b.Fatal(err)
			}
		}
	}
	minute()
	status := func(name string) float64 {
		var n string
		var v float64
		if err := dbs[0].QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&n, &v); err != nil {
			b.Fatal(err)
		}
		return v
	}
	names := []string{"Questions", "Bytes_received", "Innodb_data_written", "Innodb_os_log_written"}
	before := map[string]float64{}
	for _, n := range names {
		before[n] = status(n)
	}
	userRows := func() float64 {
		return testutil.ToFloat64(a.Flusher.met.rowsWritten.WithLabelValues("usage_user_chunks"))
	}
	table := "usage_user_chunks"
	if rows {
		table = "usage_user_days"
	}
	userStmts := func() float64 { return testutil.ToFloat64(a.Flusher.met.statements.WithLabelValues(table)) }
	rows0, stmts0 := userRows(), userStmts()
	cpu0 := srv.CPUTime()
	b.ResetTimer()
	for range b.N {
		minute()
	}
	b.StopTimer()
	time.Sleep(time.Second)
	time.Sleep(2 * time.Second) // InnoDB's background writes
	cpu := srv.CPUTime() - cpu0
	per1k := float64(b.N*flushes*perFlush) / 1000
	b.ReportMetric(float64(cpu.Microseconds())/1000/per1k, "mariadb-ms/1k-calls")
	b.ReportMetric((userRows()-rows0)/per1k, "user-rows/1k-calls")
	b.ReportMetric((userStmts()-stmts0)/per1k, "user-stmts/1k-calls")
	b.ReportMetric((status("Questions")-before["Questions"])/per1k, "mysql-stmts/1k-calls")
	b.ReportMetric((status("Bytes_received")-before["Bytes_received"])/per1k, "bytes-received/1k-calls")
	b.ReportMetric((status("Innodb_data_written")-before["Innodb_data_written"])/per1k, "innodb-bytes-written/1k-calls")
	b.ReportMetric((status("Innodb_os_log_written")-before["Innodb_os_log_written"])/per1k, "redo-bytes/1k-calls")
	var size float64
	for _, db := range dbs {
		var n sql.NullFloat64
		if err := db.QueryRow("SELECT SUM(data_length + index_length) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&n); err != nil {
			b.Fatal(err)
		}
		size += n.Float64
	}
	b.ReportMetric(size/(per1k+float64(flushes*perFlush)/1000), "table-bytes/1k-calls")
}

// BenchmarkRecordAndFlushStore (EVALUATION ONLY) is BenchmarkRecordAndFlush
// with either store of the per-user figures, for callgrind.
func BenchmarkRecordAndFlushStore(b *testing.B) {
	for _, store := range []string{"chunks", "rows"} {
		b.Run("store="+store, func(b *testing.B) {
			const flushEvery = 200_000
			dbs := testenv.MySQLShards(b, 2)
			for _, db := range dbs {
				if _, err := db.Exec(userDaysDDL); err != nil {
					b.Fatal(err)
				}
			}
			rdb, prefix := testenv.Redis(b)
			clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 30, 0, time.UTC))
			a, err := New(Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk})
			if err != nil {
				b.Fatal(err)
			}
			a.Flusher.users.perUserRows = store == "rows"
			load := newUniformLoad()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				app, iface, user := load.Next()
				a.Recorder.Record(app, iface, user, true)
				if (i+1)%flushEvery == 0 {
					clk.Advance(15 * time.Second)
					if err := a.Flusher.Flush(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := a.Flusher.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
