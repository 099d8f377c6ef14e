package worker

import (
	"context"
	"testing"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/migrate/activity"
)

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
		before := moveenv.CountRows(t, dbs, "cell_activity_log")
		w.Activity.Observe(moveenv.CellsOf(moveenv.DailyRefs(3)), 0)
		last = w.flushOnNewCycle(ctx, last)
		// A flush writes a log row a part the cells fall in.
		if got := moveenv.CountRows(t, dbs, "cell_activity_log") - before; (got > 0) != step.flush {
			t.Fatalf("%s: %d log rows written by the poll, want a flush: %v", step.name, got, step.flush)
		}
		if !step.flush {
			if err := w.Activity.Flush(ctx); err != nil { // start the next step empty
				t.Fatal(err)
			}
		}
	}
}
