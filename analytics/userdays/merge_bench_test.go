package userdays

import (
	"context"
	"crypto/rand"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/internal/testsupport/benchload"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// BenchmarkMergeUserChunks is Rollup's merge of one app's chunks of today
// (mergeAppChunks) at its first two levels, with make bench's uniform load
// as quotad sees it at ~26,000 checks a second (1,000 apps × 50 interfaces
// × 100,000 users): a flush batch of one app holds ~400 entries, nearly all
// of them distinct, so
//
//   - level=0 merges mergeMinBatches flush batches of 400 entries (12,800)
//     into one level-1 batch;
//   - level=1 merges mergeFanIn such level-1 batches (204,800 entries) into
//     one of level 2.
//
// The batches are built once and restored before each op (untimed). The
// MariaDB is private (testenv.StartMariaDB), so its CPU from /proc is the
// merge's alone: each op's figure runs from the merge's start to 300 ms
// after its commit (InnoDB's purge of the deleted chunks starts at once),
// and the restore rests as long before the op starts. Reported per entry
// merged: ns (wall), quotad-us (this process's CPU: the merge, its garbage
// collection) and mariadb-us; and per op the entries, the bytes of chunk
// bodies read and allocated bytes and objects (-benchmem).
func BenchmarkMergeUserChunks(b *testing.B) {
	srv := testenv.StartMariaDB(b)
	db := srv.Shard(b, "quota_0")
	u := newTestStore()
	for _, level := range []uint8{0, 1} {
		b.Run("level="+strconv.Itoa(int(level)), func(b *testing.B) { benchMergeLevel(b, u, srv, db, level) })
	}
}

const (
	mergeBenchApp        = "app-7"
	mergeBenchPerFlush   = 400 // one app's calls in a 15 s flush at ~26,000 checks/s over 1,000 apps
	mergeBenchSettleTime = 300 * time.Millisecond
)

func benchMergeLevel(b *testing.B, u *Store, srv *testenv.MariaDBProcess, db *sql.DB, level uint8) {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	day := t0Day
	exec := func(q string) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	exec("DELETE FROM usage_user_chunks")
	buildMergeLevel(b, u, conn, day, level)
	var entries, bodyBytes int64
	if err := db.QueryRow("SELECT SUM(entries), SUM(LENGTH(body)) FROM usage_user_chunks WHERE level = ?", level).Scan(&entries, &bodyBytes); err != nil {
		b.Fatal(err)
	}
	exec("DROP TABLE IF EXISTS bench_merge_chunks")
	exec("CREATE TABLE bench_merge_chunks LIKE usage_user_chunks")
	exec("INSERT INTO bench_merge_chunks SELECT * FROM usage_user_chunks")
	var cpu opCPU
	var m chunkMerge
	for b.Loop() {
		b.StopTimer()
		exec("DELETE FROM usage_user_chunks")
		exec("INSERT INTO usage_user_chunks SELECT * FROM bench_merge_chunks")
		cpu.measure(b, srv, func() {
			if err := u.mergeAppChunks(ctx, conn, nil, &m, day, mergeBenchApp, level); err != nil {
				b.Fatal(err)
			}
		})
		b.StartTimer()
	}
	var merged int64
	if err := db.QueryRow("SELECT COUNT(DISTINCT batch_id) FROM usage_user_chunks WHERE level = ?", mergeTarget(level)).Scan(&merged); err != nil || merged < 1 {
		b.Fatalf("no level-%d batch after the merge: %d, %v", mergeTarget(level), merged, err)
	}
	n := float64(b.N) * float64(entries)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/entry")
	cpu.report(b, n, "entry")
	b.ReportMetric(float64(entries), "entries/op")
	b.ReportMetric(float64(bodyBytes), "body-bytes/op")
}

// buildMergeLevel writes the batches that a merge of level takes, for
// mergeBenchApp on day: flush batches as the flushes write them
// (Chunks, insertChunks) and, for level 1, merges of them.
func buildMergeLevel(b *testing.B, u *Store, conn *sql.Conn, day usage.Day, level uint8) {
	ctx := context.Background()
	load := benchload.NewUniform()
	rounds := 1 // level 0: one round of flush batches, not merged
	if level == 1 {
		rounds = mergeFanIn // each round's flush batches merged into a level-1 batch
	}
	for range rounds {
		for range mergeMinBatches {
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			writeFlushBatch(b, u, tx, day, mergeBenchApp, mergeBenchPerFlush, func() (string, string) {
				_, iface, user := load.Next()
				return iface, user
			})
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		if level == 1 {
			if err := u.mergeAppChunks(ctx, conn, nil, &chunkMerge{}, day, mergeBenchApp, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// opCPU sums the CPU time of a benchmark's ops: this process's (the op,
// its garbage collection) and the private MariaDB's, the latter counted
// until mergeBenchSettleTime after the op (InnoDB purges what it deleted
// at once), with as long a rest before it.
type opCPU struct{ own, db time.Duration }

// measure runs op timed (the caller has stopped the timer) and adds its
// CPU time.
func (c *opCPU) measure(b *testing.B, srv *testenv.MariaDBProcess, op func()) {
	time.Sleep(mergeBenchSettleTime)
	own0, db0 := testenv.SelfCPU(b), srv.CPUTime()
	b.StartTimer()
	op()
	b.StopTimer()
	c.own += testenv.SelfCPU(b) - own0
	time.Sleep(mergeBenchSettleTime)
	c.db += srv.CPUTime() - db0
}

// report reports the CPU time per unit over n units: quotad-us/unit and
// mariadb-us/unit.
func (c *opCPU) report(b *testing.B, n float64, unit string) {
	b.ReportMetric(float64(c.own.Nanoseconds())/1e3/n, "quotad-us/"+unit)
	b.ReportMetric(float64(c.db.Nanoseconds())/1e3/n, "mariadb-us/"+unit)
}

// writeFlushBatch writes, in tx, one flush batch of app's per-user chunks
// on day as a flush writes it (Chunks, insertChunks): n calls,
// each of the (interface, user) that next returns.
func writeFlushBatch(b *testing.B, u *Store, tx *sql.Tx, day usage.Day, app string, n int, next func() (iface, user string)) {
	gs := groups{}
	for range n {
		iface, user := next()
		gs.add(NewRow(Key{ID: makeRowID(app, iface, user), Day: day}, usage.Counts{Calls: 1, Allowed: 1}))
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	if err := u.insertChunks(context.Background(), tx, nil, todayChunks, id, Chunks(gs.inOrder(), sortGroup, chunkMaxRaw)); err != nil {
		b.Fatal(err)
	}
}
