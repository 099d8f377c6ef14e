package worker

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/tiers"
)

// activityRow is a cell's cell_activity row.
type activityRow struct{ since, calls int64 }

// activityRows reads cell_activity of every shard.
func activityRows(t *testing.T, dbs []*sql.DB) map[tiers.CellID]activityRow {
	t.Helper()
	rows := map[tiers.CellID]activityRow{}
	for _, db := range dbs {
		rs, err := db.Query("SELECT k, since, calls FROM cell_activity")
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var k []byte
			var r activityRow
			if err := rs.Scan(&k, &r.since, &r.calls); err != nil {
				t.Fatal(err)
			}
			rows[tiers.CellID(k)] = r
		}
		rs.Close()
	}
	return rows
}

// foldAll folds every part's flushed activity, as a cycle does part by part.
func foldAll(t *testing.T, dbs []*sql.DB) {
	t.Helper()
	for _, db := range dbs {
		for part := range activity.PartsPerShard {
			if _, err := activity.FoldLog(context.Background(), db, part); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// countRows counts a table's rows over every shard.
func countRows(t *testing.T, dbs []*sql.DB, table string) int {
	t.Helper()
	total := 0
	for _, db := range dbs {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// dailyRefs are n daily cells of n apps.
func dailyRefs(n int) []tiers.Ref {
	refs := make([]tiers.Ref, n)
	for i := range refs {
		app := "app-" + testenv.RandomHex(4)
		id := tiers.IdentityOf("daily", []string{app, testenv.RandomHex(6)})
		refs[i] = tiers.Ref{Identity: id, Window: 24 * time.Hour, Tag: tiers.TagOf(app), ShardKey: tiers.ShardKeyOf(app, "")}
	}
	return refs
}

// WatchCycles' poll flushes the activity once for each cycle it sees
// start: not while no cycle runs, once when one starts, not again for the
// same cycle, once more for the next.
func TestWatchCycles_FlushesTheActivityOnceWhenACycleStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dbs := testenv.MySQLShards(t, 1)
	w := &Worker{Mover: e.mover, DBs: dbs, Activity: &activity.Activity{DBs: dbs}}
	ctx := context.Background()
	last := ""
	for _, step := range []struct {
		name  string
		cycle string // the cycle key's value; "" none
		flush bool   // the poll flushes the cells observed before it
	}{
		{"no cycle", "", false},
		{"a cycle starts", "sched-1", true},
		{"the same cycle", "sched-1", false},
		{"the cycle key gone", "", false},
		{"the next cycle", "sched-2", true},
	} {
		if step.cycle == "" {
			e.mover.RDB.Del(ctx, w.cycleKey())
		} else if err := e.mover.RDB.Set(ctx, w.cycleKey(), step.cycle, 0).Err(); err != nil {
			t.Fatal(err)
		}
		before := countRows(t, dbs, "cell_activity_log")
		w.Activity.Observe(dailyRefs(3))
		last = w.flushOnNewCycle(ctx, last)
		// A flush writes a log row a part the cells fall in.
		if got := countRows(t, dbs, "cell_activity_log") - before; (got > 0) != step.flush {
			t.Fatalf("%s: %d log rows written by the poll, want a flush: %v", step.name, got, step.flush)
		}
		if !step.flush {
			if err := w.Activity.Flush(ctx); err != nil { // start the next step empty
				t.Fatal(err)
			}
		}
	}
}
