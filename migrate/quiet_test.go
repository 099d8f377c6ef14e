package migrate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/tiers"
)

// Quiet hot cells (no field, no filter bit, no counter of the next window)
// go cold without a journal or a freeze; idle ones (no counter) without a
// lease either: a move whose full-protocol steps all fail still moves
// them, and they are then cold with their counts, exact, and no lease or
// journal entry is left.
func TestMoveQuietToCold_TakesNoJournalOrFreeze(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mover.Faults = afterStep(func(s Step) error {
		if s != StepQuietCopy {
			return errors.New("a step of the full protocol ran")
		}
		return nil
	})
	e.mover.Metrics = NewMetrics(nil)
	cells := moveenv.NewCells(5, 4, 0)
	cells[1].App = cells[0].App // two idle cells of one tag
	cells[3].App = cells[2].App // an idle and a counted cell of one tag
	counts := []int64{0, 0, 0, 1, 3}
	for i, c := range cells {
		for range counts[i] {
			e.Check(t, tiers.Enforce, c)
		}
	}
	res, err := e.mover.MoveCells(context.Background(), moveenv.Refs(cells...), tiers.Hot, tiers.Cold)
	if err != nil || len(res.Moved) != 5 || res.Quiet != 5 || res.Idle != 3 {
		t.Fatalf("move: %+v %v, want 5 cells moved by the quiet move, 3 of them idle", res, err)
	}
	if n := testutil.ToFloat64(e.mover.Metrics.quietMoves); n != 5 {
		t.Errorf("quota_migrations_quiet_total %v, want 5", n)
	}
	if n := testutil.ToFloat64(e.mover.Metrics.idleMoves); n != 3 {
		t.Errorf("quota_migrations_idle_total %v, want 3", n)
	}
	e.mover.Faults = nil
	for i, c := range cells {
		e.expectCell(t, "after the move", c, tiers.Cold, counts[i])
	}
	ctx := context.Background()
	n, err := e.mover.RDB.Exists(ctx, e.mover.journalKey()).Result()
	if err != nil || n != 0 {
		t.Fatalf("journal key exists: %d %v", n, err)
	}
	leases, err := e.mover.RDB.Keys(ctx, e.mover.Prefix+leaseInfix+"*").Result()
	if err != nil || len(leases) != 0 {
		t.Fatalf("leases left: %v %v", leases, err)
	}
}

// A check that counts in a quiet cell between its record's copy and its
// switch keeps the cell out of the quiet move: the switch finds its counter
// changed and leaves it, and the full protocol moves the cell with its
// count (a switch that ignored the counter would make it cold with the
// count copied before the check). An idle cell's empty record is deleted
// before the full protocol runs; a counted cell's is left for the full
// protocol's copy to replace (a quiet move holds no lease, and the record
// could be byte for byte another move's).
func TestMoveQuietToCold_ACheckBeforeTheSwitchKeepsItsCount(t *testing.T) {
	t.Parallel()
	for _, before := range []int64{0, 2} {
		t.Run(fmt.Sprintf("counted-%d", before), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			busy, quiet := moveenv.NewCell(5), moveenv.NewCell(5)
			for range before {
				e.Check(t, tiers.Enforce, busy, quiet)
			}
			rowAtFullProtocol := true
			e.mover.Faults = afterStep(func(s Step) error {
				switch s {
				case StepQuietCopy:
					e.Check(t, tiers.Enforce, busy)
				case StepJournal:
					rows, err := e.Cold.Exists(context.Background(), moveenv.Refs(busy))
					if err != nil {
						return err
					}
					rowAtFullProtocol = rows[0]
				}
				return nil
			})
			e.Move(t, tiers.Hot, tiers.Cold, busy, quiet)
			e.mover.Faults = nil
			if rowAtFullProtocol != (before > 0) {
				t.Errorf("row of the cell that did not switch at the full protocol: %v, want %v", rowAtFullProtocol, before > 0)
			}
			e.expectCell(t, "counted before the switch", busy, tiers.Cold, before+1)
			e.expectCell(t, "quiet", quiet, tiers.Cold, before)
			recs, err := e.Hot.Export(context.Background(), moveenv.Refs(busy, quiet))
			if err != nil || len(recs) != 0 {
				t.Fatalf("hot counters left: %v %v", recs, err)
			}
		})
	}
}

// A counted cell whose quiet switch fails (a check counted after the
// copy) keeps its record, and its tag's filter may then hold it (a false
// positive): the full protocol's freeze takes the cell for hot all the
// same, as its counter exists (checks count there, whatever the filter
// says), and moves it with its count, its copy replacing the record. Were
// the record taken for the cell's cold row, the cell would be reported
// moved while it counts on in hot until its window ends.
func TestMoveQuietToCold_ACountedCellLeftWithItsRecordMovesWithItsCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := moveenv.NewCell(10)
	e.Check(t, tiers.Enforce, c)
	e.Check(t, tiers.Enforce, c)
	e.mover.Faults = afterStep(func(s Step) error {
		if s == StepQuietCopy {
			e.Check(t, tiers.Enforce, c)
			e.takeFullProtocol(t, c) // the filter comes to hold the cell
		}
		return nil
	})
	res, err := e.mover.MoveCells(context.Background(), moveenv.Refs(c), tiers.Hot, tiers.Cold)
	e.mover.Faults = nil
	if err != nil || len(res.Moved) != 1 || res.Quiet != 0 {
		t.Fatalf("move: %+v %v, want the cell moved by the full protocol", res, err)
	}
	recs, err := e.Hot.Export(context.Background(), moveenv.Refs(c))
	if err != nil || len(recs) != 0 {
		t.Fatalf("hot counters left: %+v %v", recs, err)
	}
	e.expectCell(t, "after the move", c, tiers.Cold, 3) // 10 more checks: 7 allowed
}

// An idle cell counts in hot from its quiet move's copy until its switch,
// even once its tag's filter holds it (a false positive that another
// cell's switch made after States): the move holds it with a counter of 0.
// Without that, the check would count in the empty row the copy wrote,
// and a check that had looked that row up before the copy (none found)
// would count in hot beside it, at the filter's version unchanged: two
// counts of one window, neither seeing the other.
func TestMoveQuietToCold_AnIdleCellCountsInHotUntilItsSwitch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := moveenv.NewCell(5)
	ctx := context.Background()
	var hot []tiers.Record
	e.mover.Faults = afterStep(func(s Step) error {
		if s == StepQuietCopy {
			e.takeFullProtocol(t, c) // the filter comes to hold the cell
			e.Check(t, tiers.Enforce, c)
			var err error
			hot, err = e.Hot.Export(ctx, moveenv.Refs(c))
			return err
		}
		return nil
	})
	e.Move(t, tiers.Hot, tiers.Cold, c)
	e.mover.Faults = nil
	if len(hot) != 1 || hot[0].Count != 1 {
		t.Fatalf("hot records after a check between copy and switch: %+v, want the cell's count 1", hot)
	}
	e.expectCell(t, "after the move", c, tiers.Cold, 1)
}

// A quiet cell whose window (and so its counter, or an idle cell's 0)
// ends within a LeaseTTL takes the full protocol, not the quiet move: its
// record would be copied too close to the end of what keeps checks off it.
func TestMoveQuietToCold_ACellNearItsWindowsEndTakesTheFullProtocol(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		counted int64
		left    time.Duration // of the window at the move
		quiet   int
	}{
		{"idle, a minute left", 0, time.Minute, 1},
		{"idle, 5 s left", 0, 5 * time.Second, 0},
		{"counted, a minute left", 2, time.Minute, 1},
		{"counted, 5 s left", 2, 5 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := moveenv.NewCell(5)
			e.Clock.Set(e.Clock.Now().Truncate(c.Window).Add(c.Window - tc.left))
			for range tc.counted {
				e.Check(t, tiers.Enforce, c)
			}
			res, err := e.mover.MoveCells(context.Background(), moveenv.Refs(c), tiers.Hot, tiers.Cold)
			if err != nil || len(res.Moved) != 1 || res.Quiet != tc.quiet {
				t.Fatalf("move: %+v %v, want the cell moved, %d by the quiet move", res, err, tc.quiet)
			}
			e.expectCell(t, "after the move", c, tiers.Cold, tc.counted)
		})
	}
}

// An idle cell that did not switch (a check counted first) and that the
// full protocol then skips (another worker holds its lease) stays hot with
// its count, and the record inserted for it is deleted: no row is left for
// a cell that is not cold.
func TestMoveQuietToCold_ACellThatDidNotSwitchLeavesNoRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := moveenv.NewCell(5)
	other := *e.mover
	other.Faults = nil
	e.mover.Faults = afterStep(func(s Step) error {
		if s == StepQuietCopy {
			e.Check(t, tiers.Enforce, c)
			if _, err := other.lease(context.Background(), moveenv.Refs(c)); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	res, err := e.mover.MoveCells(context.Background(), moveenv.Refs(c), tiers.Hot, tiers.Cold)
	if err != nil || len(res.Moved) != 0 || res.Skipped != 1 {
		t.Fatalf("move: %+v %v, want the cell skipped", res, err)
	}
	e.mover.Faults = nil
	rows, err := e.Cold.Exists(context.Background(), moveenv.Refs(c))
	if err != nil || rows[0] {
		t.Fatalf("cold row of a hot cell: %v %v", rows, err)
	}
	e.expectCell(t, "after the skipped move", c, tiers.Hot, 1)
}

// A quiet move of a counted cell that stops between its copy and its
// switch (a crash) leaves a cold row with the count it copied, and no
// lease. The cell counts on in hot, exactly; a later move replaces the
// row; and in a later window a check that finds the row (its tag's filter
// holding the cell by a false positive) counts from 0.
func TestMoveQuietToCold_ACrashBeforeTheSwitchLosesNoCount(t *testing.T) {
	t.Parallel()
	for _, later := range []string{"moved-cold", "next-window"} {
		t.Run(later, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := moveenv.NewCell(10)
			for range 2 {
				e.Check(t, tiers.Enforce, c)
			}
			crashing := e.crashingMover(StepQuietCopy, 200*time.Millisecond)
			if _, err := crashing.MoveCells(context.Background(), moveenv.Refs(c), tiers.Hot, tiers.Cold); err == nil {
				t.Fatal("the crashing move succeeded")
			}
			rows, err := e.Cold.Exists(context.Background(), moveenv.Refs(c))
			if err != nil || !rows[0] {
				t.Fatalf("no row left by the crash: %v %v", rows, err)
			}
			leases, err := e.mover.RDB.Keys(context.Background(), e.mover.Prefix+leaseInfix+"*").Result()
			if err != nil || len(leases) != 0 {
				t.Fatalf("leases left by the crash: %v %v", leases, err)
			}
			e.expectCell(t, "after the crash", c, tiers.Hot, 2) // 10 more checks: 8 allowed
			switch later {
			case "moved-cold":
				e.Move(t, tiers.Hot, tiers.Cold, c)
				e.expectCell(t, "moved", c, tiers.Cold, 10)
			case "next-window":
				e.Clock.Advance(c.Window)
				e.takeFullProtocol(t, c)
				e.expectCell(t, "next window", c, tiers.Cold, 0)
			}
		})
	}
}

// Checks racing the move of quiet cells to cold are exact: every cell ends
// with as many counted as were allowed, wherever the race put it. Half the
// cells have counted before (their counter then holds a count to copy).
func TestMoveQuietToCold_RacingChecksAreExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.Router.MovedWait = 15 * time.Second
	const n, limit = 300, 3
	cells := moveenv.NewCells(n, limit, 7) // a few tags
	allowed := make([]atomic.Int64, n)
	for i := 0; i < n; i += 2 {
		e.Check(t, tiers.Enforce, cells[i])
		allowed[i].Add(1)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range n {
				i := r.IntN(n)
				if op := e.Check(t, tiers.Enforce, cells[i]); op != nil && op.Allowed() {
					allowed[i].Add(1)
				}
			}
		}()
	}
	for part := range 6 {
		lo, hi := part*n/6, (part+1)*n/6
		if _, err := e.mover.MoveCells(context.Background(), moveenv.Refs(cells[lo:hi]...), tiers.Hot, tiers.Cold); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
	cold := 0
	for i, c := range cells {
		tier := e.TierOf(t, c)
		if tier == tiers.Cold {
			cold++
		}
		if got, want := e.Count(t, c), allowed[i].Load(); got != want {
			t.Fatalf("cell %d (%s): count %d, allowed %d", i, tier, got, want)
		}
	}
	t.Logf("%d of %d cells cold", cold, n)
}

// A worker that stalls between a quiet cell's record and its switch wakes
// up to a cell that has since moved (cold, cold and back to hot, or warm,
// by other workers), having counted or not: its switch and its clean-up
// leave the count exact and the cell where the last finished move put it,
// or move it on to cold with its count. "unchanged": the cell went cold
// and back without a check, so its counter holds what the stalled worker
// copied, and only the filter's bits, which its switch into cold set and
// the switch of a counted cell refuses, keep that worker from switching a
// cell whose row the move back deleted.
func TestMoveQuietToCold_StalledWorkerLosesNoCount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		checks int             // during the stall, before the moves, and after each
		moves  [][2]tiers.Tier // made by other workers during the stall
		final  tiers.Tier
	}{
		{"moved-cold", 3, [][2]tiers.Tier{{tiers.Hot, tiers.Cold}}, tiers.Cold},
		{"moved-cold-and-back", 3, [][2]tiers.Tier{{tiers.Hot, tiers.Cold}, {tiers.Cold, tiers.Hot}}, tiers.Cold},
		{"moved-cold-and-back-unchanged", 0, [][2]tiers.Tier{{tiers.Hot, tiers.Cold}, {tiers.Cold, tiers.Hot}}, tiers.Cold},
		{"moved-warm", 3, [][2]tiers.Tier{{tiers.Hot, tiers.Warm}}, tiers.Warm},
	} {
		for _, before := range []int{0, 2} {
			t.Run(fmt.Sprintf("%s/counted-%d", tc.name, before), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				c := moveenv.NewCell(10)
				for range before {
					e.Check(t, tiers.Enforce, c)
				}
				stalled, resume := make(chan struct{}), make(chan struct{})
				slow := *e.mover
				slow.Faults = afterStep(func(s Step) error {
					if s == StepQuietCopy {
						close(stalled)
						<-resume
					}
					return nil
				})
				moved := make(chan error, 1)
				go func() {
					_, err := slow.MoveCells(context.Background(), moveenv.Refs(c), tiers.Hot, tiers.Cold)
					moved <- err
				}()
				<-stalled
				n := before
				for range tc.checks {
					e.Check(t, tiers.Enforce, c)
					n++
				}
				for _, m := range tc.moves {
					e.Move(t, m[0], m[1], c)
					if tc.checks > 0 {
						e.Check(t, tiers.Enforce, c)
						n++
					}
				}
				close(resume)
				if err := <-moved; err != nil {
					t.Fatalf("the stalled worker's move: %v", err)
				}
				// An idle cell's switch expects the 0 its worker held it
				// with, which the move back did not leave (a count of 0
				// makes no counter): the full protocol moves it on.
				e.expectCell(t, "after the stalled worker", c, tc.final, int64(n))
			})
		}
	}
}
