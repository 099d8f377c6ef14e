package worker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/tiers"
)

// refsOfParts returns n daily cells of each of two different log parts.
func refsOfParts(n int) (a, b []tiers.Ref, partA, partB int) {
	partA, partB = -1, -1
	for len(a) < n || len(b) < n {
		r := moveenv.DailyRefs(1)[0]
		switch p := activity.PartOfCell(r.ID()); {
		case partA < 0 || p == partA:
			partA = p
			if len(a) < n {
				a = append(a, r)
			}
		case partB < 0 || p == partB:
			partB = p
			if len(b) < n {
				b = append(b, r)
			}
		}
	}
	return a, b, partA, partB
}

// partRows counts a part's cell_activity_log rows.
func partRows(t *testing.T, e *env, part int) int {
	t.Helper()
	var n int
	if err := e.Cold.DBs()[0].QueryRow("SELECT COUNT(*) FROM cell_activity_log WHERE part = ?", part).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Between cycles, a part whose log outgrows LogMaxRows is folded into
// cell_activity, by one instance at a time; a shorter part waits for its
// cycle, and no bound (0) leaves every part to the cycles.
func TestFoldLongLogs_FoldsOnlyThePartsPastTheBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		maxRows    int
		lockedA    bool // another instance is folding part A
		wantFolded bool // part A folded
	}{
		{"part past the bound", 3, false, true},
		{"another instance folds it", 3, true, false},
		{"cycles only", 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			db := e.Cold.DBs()[:1]
			w := &Worker{Mover: e.mover, DBs: db, Config: Config{LogMaxRows: tc.maxRows}}
			act := &activity.Activity{DBs: db}
			long, short, partA, partB := refsOfParts(5)
			for i := range 5 { // part A: a row a flush, 5 rows
				act.Observe(moveenv.CellsOf(long), 0)
				if i < 2 { // part B: 2 rows
					act.Observe(moveenv.CellsOf(short), 0)
				}
				if err := act.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if tc.lockedA {
				key := e.mover.Prefix + "mig:logfold:0:" + strconv.Itoa(partA)
				if err := e.mover.RDB.Set(context.Background(), key, "other", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			n, err := w.FoldLongLogs(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rows := moveenv.ActivityRows(t, db)
			if tc.wantFolded {
				if n != len(long) || partRows(t, e, partA) != 0 {
					t.Fatalf("folded %d entries, %d rows left in part %d; want %d and 0", n, partRows(t, e, partA), partA, len(long))
				}
				for i, r := range long {
					if rows[r.ID()].Calls != 5 {
						t.Fatalf("cell %d of the long part: %+v, want 5 calls", i, rows[r.ID()])
					}
				}
			} else if n != 0 || partRows(t, e, partA) != 5 {
				t.Fatalf("folded %d entries, %d rows left in part %d; want 0 and 5", n, partRows(t, e, partA), partA)
			}
			if got := partRows(t, e, partB); got != 2 {
				t.Fatalf("part %d (2 rows, under the bound): %d rows left, want 2", partB, got)
			}
			for _, r := range short {
				if _, ok := rows[r.ID()]; ok {
					t.Fatalf("a cell of the short part was folded: %+v", rows[r.ID()])
				}
			}
		})
	}
}
