package userdays

import (
	"context"
	"crypto/rand"
	"database/sql"
	"testing"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/internal/testsupport/benchload"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// BenchmarkUserLayout answers whether the per-user figures could be stored
// plainly: the same flushes of make bench's uniform load (16,000 calls a
// second over 1,000 apps × 50 interfaces × 100,000 users, four 15 s
// flushes a minute), their per-user figures written in the same run, on
// the same private MariaDB, both ways:
//
//   - chunks: as quotad writes them (Store.Write into
//     usage_user_chunks), and after the last op, untimed, the rollup's
//     level-0 merges of the day's batches (every app's flushes so far into
//     one batch) and the seal of the day, as the chunks' lifetime costs;
//   - rows: one upsert per (day, app, user, interface) into usage_user_daily
//     (the plain table, keyed day first), in primary-key order, in
//     multi-row statements of RowsPerStatement rows, as the flush writes
//     usage_daily.
//
// One op is one minute: four flush transactions per layout. Reported per
// layout: mariadb-us/entry and quotad-us/entry (the CPU of the writes,
// MariaDB's counted until 300 ms after each commit), and for chunks
// merge- and seal-mariadb-us/entry and -quotad-us/entry; the InnoDB bytes
// of each layout's table (data and index, after ANALYZE TABLE) per entry
// written. Run with -benchtime 8x (32 flushes: one merge of every app).
func BenchmarkUserLayout(b *testing.B) {
	const (
		perFlush = 16_000 * 15
		flushes  = 4
	)
	srv := testenv.StartMariaDB(b)
	chunkDB, rowDB := srv.Shard(b, "quota_chunks"), srv.Shard(b, "quota_rows")
	users := newTestStore()
	day := t0Day
	load := benchload.NewUniform()
	ctx := context.Background()
	var chunkCPU, rowCPU opCPU
	var entries int64
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		for range flushes {
			gs := groups{}
			for range perFlush {
				app, iface, user := load.Next()
				gs.add(NewRow(Key{ID: makeRowID(app, iface, user), Day: day}, usage.Counts{Calls: 1, Allowed: 1}))
			}
			flush := gs.inOrder()
			for _, g := range flush {
				sortGroup(g) // both layouts write the same sorted, summed rows
				entries += int64(len(g.Rows))
			}
			chunkCPU.measure(b, srv, func() {
				inTx(b, chunkDB, func(tx *sql.Tx) {
					var id [16]byte
					_, _ = rand.Read(id[:])
					if _, err := users.Write(ctx, tx, nil, flush, func(*Group) {}, id); err != nil {
						b.Fatal(err)
					}
				})
			})
			rowCPU.measure(b, srv, func() {
				inTx(b, rowDB, func(tx *sql.Tx) { writeUserRows(b, tx, users, flush) })
			})
		}
	}
	n := float64(entries)
	chunkCPU.report(b, n, "entry-chunks")
	rowCPU.report(b, n, "entry-rows")
	// The chunks' later rewrites: the merge of each app's batches so far,
	// then the seal of the day.
	conn, err := chunkDB.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var merge, seal opCPU
	merge.measure(b, srv, func() {
		for _, app := range load.Apps {
			if err := users.mergeAppChunks(ctx, conn, nil, &chunkMerge{}, day, app, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	merge.report(b, n, "entry-merge")
	b.ReportMetric(tableBytes(b, chunkDB, "usage_user_chunks")/n, "chunk-table-B/entry")
	seal.measure(b, srv, func() {
		if _, err := users.Seal(ctx, conn, day+1); err != nil {
			b.Fatal(err)
		}
	})
	seal.report(b, n, "entry-seal")
	b.ReportMetric(tableBytes(b, chunkDB, "usage_user_sealed")/n, "sealed-table-B/entry")
	b.ReportMetric(tableBytes(b, rowDB, "usage_user_daily")/n, "row-table-B/entry")
	b.ReportMetric(n/float64(b.N), "entries/op")
}

// inTx runs fn in a transaction of db and commits it.
func inTx(b *testing.B, db *sql.DB, fn func(tx *sql.Tx)) {
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	fn(tx)
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// userRowsTable is the plain layout: one upserted row per (day, app, user,
// interface).
var userRowsTable = usage.InsertTable{Name: "usage_user_daily", Cols: "day, app_id, user_id, interface_id, calls, allowed, denied",
	Suffix: " ON DUPLICATE KEY UPDATE calls = calls + VALUES(calls), allowed = allowed + VALUES(allowed), denied = denied + VALUES(denied)"}

// writeUserRows upserts the groups' sorted user rows into
// usage_user_daily, in its primary-key order (day, app, user, interface).
func writeUserRows(b *testing.B, tx *sql.Tx, u *Store, flush []*Group) {
	var rows []*Row
	for _, g := range flush {
		for i := range g.Rows {
			rows = append(rows, &g.Rows[i])
		}
	}
	err := usage.InsertRows(context.Background(), tx, nil, u.statements, u.perStatement, userRowsTable, len(rows), nil, func(args []any, i int) []any {
		r := rows[i]
		app, iface, user := r.ID.Split()
		return append(args, r.Day.String(), app, user, iface, r.Calls, r.Allowed, r.Denied)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// tableBytes is InnoDB's data and index bytes of table (after ANALYZE).
func tableBytes(b *testing.B, db *sql.DB, table string) float64 {
	if _, err := db.Exec("ANALYZE TABLE " + table); err != nil {
		b.Fatal(err)
	}
	var n float64
	if err := db.QueryRow("SELECT data_length + index_length FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
