package migrate

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quota-platform/quota/tiers"
)

// Idle hot cells (no counter, no field, no filter bit) go cold without a
// lease, a journal or a freeze: a move whose full-protocol steps all fail
// still moves them, and they are then cold, at 0, and exact.
func TestMoveIdleToCold_TakesNoLeaseJournalOrFreeze(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mover.Faults = afterStep(func(s Step) error {
		if s != StepIdleCopy {
			return errors.New("a step of the full protocol ran")
		}
		return nil
	})
	e.mover.Metrics = NewMetrics(nil)
	cells := []cellSpec{newCell(4), newCell(4), newCell(4)}
	cells[1].app = cells[0].app // two cells of one tag
	res, err := e.mover.MoveCells(context.Background(), refsOf(cells...), tiers.Hot, tiers.Cold)
	if err != nil || len(res.Moved) != 3 || res.Idle != 3 {
		t.Fatalf("move: %+v %v, want 3 cells moved by the idle move", res, err)
	}
	if n := testutil.ToFloat64(e.mover.Metrics.idleMoves); n != 3 {
		t.Errorf("quota_migrations_idle_total %v, want 3", n)
	}
	e.mover.Faults = nil
	for _, c := range cells {
		e.expectCell(t, "after the move", c, tiers.Cold, 0)
	}
	n, err := e.mover.RDB.Exists(context.Background(), e.mover.journalKey()).Result()
	if err != nil || n != 0 {
		t.Fatalf("journal key exists: %d %v", n, err)
	}
}

// A check that counts in an idle cell between its record's insert and its
// switch keeps the cell out of the idle move: the switch finds its counter
// and leaves it, and the full protocol moves it with its count (a switch
// that ignored counters would make it cold at 0 while its counter lives).
func TestMoveIdleToCold_ACheckBeforeTheSwitchKeepsItsCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	busy, idle := newCell(5), newCell(5)
	e.mover.Faults = afterStep(func(s Step) error {
		if s == StepIdleCopy {
			e.check(t, tiers.Enforce, busy)
		}
		return nil
	})
	e.move(t, tiers.Hot, tiers.Cold, busy, idle)
	e.mover.Faults = nil
	e.expectCell(t, "counted before the switch", busy, tiers.Cold, 1)
	e.expectCell(t, "idle", idle, tiers.Cold, 0)
	recs, err := e.hot.Export(context.Background(), refsOf(busy))
	if err != nil || len(recs) != 0 {
		t.Fatalf("hot counters left: %v %v", recs, err)
	}
}

// An idle cell that did not switch (a check counted first) and that the
// full protocol then skips (another worker holds its lease) stays hot with
// its count, and the record inserted for it is deleted: no row is left for
// a cell that is not cold.
func TestMoveIdleToCold_ACellThatDidNotSwitchLeavesNoRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := newCell(5)
	other := *e.mover
	other.Faults = nil
	e.mover.Faults = afterStep(func(s Step) error {
		if s == StepIdleCopy {
			e.check(t, tiers.Enforce, c)
			if _, err := other.lease(context.Background(), refsOf(c)); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	res, err := e.mover.MoveCells(context.Background(), refsOf(c), tiers.Hot, tiers.Cold)
	if err != nil || len(res.Moved) != 0 || res.Skipped != 1 {
		t.Fatalf("move: %+v %v, want the cell skipped", res, err)
	}
	e.mover.Faults = nil
	rows, err := e.cold.Exists(context.Background(), refsOf(c))
	if err != nil || rows[0] {
		t.Fatalf("cold row of a hot cell: %v %v", rows, err)
	}
	e.expectCell(t, "after the skipped move", c, tiers.Hot, 1)
}

// Checks racing the move of idle cells to cold are exact: every cell ends
// with as many counted as were allowed, wherever the race put it.
func TestMoveIdleToCold_RacingChecksAreExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.router.MovedWait = 15 * time.Second
	const n, limit = 300, 3
	cells := newCells(n, limit, 7) // a few tags
	allowed := make([]atomic.Int64, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range n {
				i := r.IntN(n)
				if op := e.check(t, tiers.Enforce, cells[i]); op != nil && op.Allowed() {
					allowed[i].Add(1)
				}
			}
		}()
	}
	for part := range 6 {
		lo, hi := part*n/6, (part+1)*n/6
		if _, err := e.mover.MoveCells(context.Background(), refsOf(cells[lo:hi]...), tiers.Hot, tiers.Cold); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
	cold := 0
	for i, c := range cells {
		tier := e.tierOf(t, c)
		if tier == tiers.Cold {
			cold++
		}
		if got, want := e.count(t, c), allowed[i].Load(); got != want {
			t.Fatalf("cell %d (%s): count %d, allowed %d", i, tier, got, want)
		}
	}
	t.Logf("%d of %d cells cold", cold, n)
}

// A worker that stalls between an idle cell's record and its switch wakes
// up to a cell that has since counted and moved (cold, cold and back to
// hot, or warm, by other workers): its switch and its clean-up leave the
// count exact and the cell where the last finished move put it, or move it
// on to cold with its count.
func TestMoveIdleToCold_StalledWorkerLosesNoCount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		moves [][2]tiers.Tier // made by other workers during the stall, after 3 checks
		final tiers.Tier
	}{
		{"moved-cold", [][2]tiers.Tier{{tiers.Hot, tiers.Cold}}, tiers.Cold},
		{"moved-cold-and-back", [][2]tiers.Tier{{tiers.Hot, tiers.Cold}, {tiers.Cold, tiers.Hot}}, tiers.Cold},
		{"moved-warm", [][2]tiers.Tier{{tiers.Hot, tiers.Warm}}, tiers.Warm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := newCell(10)
			stalled, resume := make(chan struct{}), make(chan struct{})
			slow := *e.mover
			slow.Faults = afterStep(func(s Step) error {
				if s == StepIdleCopy {
					close(stalled)
					<-resume
				}
				return nil
			})
			moved := make(chan error, 1)
			go func() {
				_, err := slow.MoveCells(context.Background(), refsOf(c), tiers.Hot, tiers.Cold)
				moved <- err
			}()
			<-stalled
			for range 3 {
				e.check(t, tiers.Enforce, c)
			}
			for _, m := range tc.moves {
				e.move(t, m[0], m[1], c)
				e.check(t, tiers.Enforce, c)
			}
			close(resume)
			if err := <-moved; err != nil {
				t.Fatalf("the stalled worker's move: %v", err)
			}
			e.expectCell(t, "after the stalled worker", c, tc.final, int64(3+len(tc.moves)))
		})
	}
}
