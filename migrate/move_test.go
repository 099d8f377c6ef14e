package migrate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/routing"
)

var allTiers = []tiers.Tier{tiers.Hot, tiers.Warm, tiers.Cold}

// Limit N gives exactly N allowed calls, in each tier, through the router,
// and Outcome.Tier names the tier.
func TestRouterExactInEachTier(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tier := range allTiers {
		t.Run(string(tier), func(t *testing.T) {
			t.Parallel()
			c := moveenv.NewCell(7)
			e.Place(t, tier, c)
			if got := e.TierOf(t, c); got != tier {
				t.Fatalf("tier %q, want %q", got, tier)
			}
			allowed := 0
			for range 12 {
				op := e.Check(t, tiers.Enforce, c)
				if op == nil {
					t.FailNow()
				}
				if op.Out[0].Tier != tier {
					t.Fatalf("outcome tier %q, want %q", op.Out[0].Tier, tier)
				}
				if op.Allowed() {
					allowed++
				}
			}
			if allowed != 7 || e.Count(t, c) != 7 {
				t.Fatalf("allowed %d, count %d, want 7 and 7", allowed, e.Count(t, c))
			}
		})
	}
}

// One op over cells in three tiers is all-or-nothing: the tightest limit
// decides, and denied ops count nowhere.
func TestRouterMixedOpAllOrNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h, w, c := moveenv.NewCell(9), moveenv.NewCell(4), moveenv.NewCell(6)
	w.App, c.App = h.App, h.App // one tag: one script call on a cluster too
	e.Place(t, tiers.Warm, w)
	e.Place(t, tiers.Cold, c)
	allowed := 0
	for range 10 {
		op := e.Check(t, tiers.Enforce, h, w, c)
		if op.Allowed() {
			allowed++
		}
		if got := fmt.Sprint(op.Out[0].Tier, op.Out[1].Tier, op.Out[2].Tier); got != "hotwarmcold" {
			t.Fatalf("tiers %s", got)
		}
	}
	if allowed != 4 {
		t.Fatalf("allowed %d, want 4", allowed)
	}
	for _, x := range []moveenv.Cell{h, w, c} {
		if n := e.Count(t, x); n != 4 {
			t.Fatalf("cell %s count %d, want 4", x.Rule, n)
		}
	}
	// Report counts everywhere; a dry run nowhere.
	e.Check(t, tiers.Report, h, w, c)
	e.Check(t, tiers.DryRun, h, w, c)
	for _, x := range []moveenv.Cell{h, w, c} {
		if n := e.Count(t, x); n != 5 {
			t.Fatalf("cell %s count %d, want 5", x.Rule, n)
		}
	}
}

// Moves keep the count, every direction.
func TestMoveKeepsCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := moveenv.NewCell(100)
	want := int64(0)
	path := []tiers.Tier{tiers.Warm, tiers.Cold, tiers.Hot, tiers.Cold, tiers.Warm, tiers.Hot}
	from := tiers.Hot
	for _, to := range path {
		for range 3 {
			e.Check(t, tiers.Enforce, c)
			want++
		}
		e.Move(t, from, to, c)
		if got := e.TierOf(t, c); got != to {
			t.Fatalf("%s>%s: tier %q", from, to, got)
		}
		if n := e.Count(t, c); n != want {
			t.Fatalf("%s>%s: count %d, want %d", from, to, n, want)
		}
		from = to
	}
}

// 32 goroutines call two cells while a loop moves both
// hot>warm>cold>hot again and again, one op per check or in batches of
// several (the router then decides their cold parts as one group): the
// saturated cell allows exactly its limit, and each final count equals
// what was allowed. With cold hints, the router sends the cells straight
// to cold whenever they were found there before, also while they are
// elsewhere or on their way.
func TestMoveRace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
		hints bool
	}{
		{"one op per check", 1, false},
		{"four ops per check", 4, false},
		{"one op per check, cold hints", 1, true},
		{"four ops per check, cold hints", 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			moveRace(t, tc.batch, tc.hints)
		})
	}
}

func moveRace(t *testing.T, batch int, hints bool) {
	e := newEnv(t)
	if hints {
		e.Router.ColdHints = routing.NewColdHints(64)
	}
	// The test is of exactness, not of latency: a check waits for a move
	// however long the machine makes it. With other packages' tests on the
	// same cores a batch's move has taken more than the default 2 s, and
	// checks then answered "unavailable" (the fail mode), failing the test.
	e.Router.MovedWait = 15 * time.Second
	a, b := moveenv.NewCell(300), moveenv.NewCell(1_000_000)
	b.App = a.App
	var allowed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var moves atomic.Int64
	moveErr := make(chan error, 1)
	// moverFailed ends the checks early: a mover that stopped on an error
	// can leave the cells frozen (a Worker's Repair rolls them forward
	// within RepairEvery once the lease is released; none runs here), and
	// each check would then wait out MovedWait, up to 500 times, before
	// the test reported the mover's error.
	var moverFailed atomic.Bool
	go func() {
		defer close(moveErr)
		cycle := []tiers.Tier{tiers.Hot, tiers.Warm, tiers.Cold, tiers.Hot, tiers.Cold, tiers.Warm}
		var skippingSince time.Time
		for i := 0; ; {
			select {
			case <-stop:
				return
			default:
			}
			from, to := cycle[i%len(cycle)], cycle[(i+1)%len(cycle)]
			res, err := e.mover.MoveCells(context.Background(), moveenv.Refs(a, b), from, to)
			if err == nil && len(res.Moved) != 2 && res.Skipped > 0 {
				// A check placing a cell it found new holds its lease
				// for a moment: the same move again (a cell already
				// moved counts as moved). The moment is bounded in time,
				// not in tries: under load the check holding the lease
				// can be descheduled for longer than 1,000 tries take
				// (a run beside other packages' tests failed so). Under
				// the env's LeaseTTL (5 s), so a lease never released
				// still fails the test.
				if skippingSince.IsZero() {
					skippingSince = time.Now()
				}
				if time.Since(skippingSince) < 3*time.Second {
					time.Sleep(time.Millisecond)
					continue
				}
			}
			skippingSince = time.Time{}
			if err != nil || len(res.Moved) != 2 {
				moveErr <- fmt.Errorf("move %s>%s: %v (moved %d, skipped %d)", from, to, err, len(res.Moved), res.Skipped)
				moverFailed.Store(true)
				return
			}
			moves.Add(1)
			i++
		}
	}()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// At least 20 checks each, and on until the mover has made
			// a few moves (bounded), so the race is always exercised.
			for i := 0; (i < 20/batch || moves.Load() < 6 && i < 500) && !moverFailed.Load(); i++ {
				for _, op := range e.checkBatch(t, tiers.Enforce, batch, a, b) {
					if op.Allowed() {
						allowed.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-moveErr; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d moves during the checks", moves.Load())
	if moves.Load() < 6 {
		t.Errorf("only %d moves ran during the checks", moves.Load())
	}
	if n := allowed.Load(); n != 300 {
		t.Fatalf("allowed %d, want 300", n)
	}
	if ca, cb := e.Count(t, a), e.Count(t, b); ca != 300 || cb != 300 {
		t.Fatalf("final counts %d, %d; want 300, 300", ca, cb)
	}
}

// A move stopped after each step (a crash) is finished by Repair: the
// counts are intact and the cell is routable and exact.
func TestMoveCrashThenRepair(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, from := range allTiers {
		for _, to := range allTiers {
			if from == to {
				continue
			}
			for step := StepJournal; step <= StepDelete; step++ {
				t.Run(fmt.Sprintf("%s>%s/after-%s", from, to, step), func(t *testing.T) {
					t.Parallel()
					e := e.ownJournal()
					c := moveenv.NewCell(10)
					e.Place(t, from, c)
					if from == tiers.Hot && to == tiers.Cold {
						e.takeFullProtocol(t, c) // the quiet move has no such steps
					}
					for range 4 {
						e.Check(t, tiers.Enforce, c)
					}
					crashing := e.crashingMover(step, 300*time.Millisecond)
					if _, err := crashing.MoveCells(context.Background(), moveenv.Refs(c), from, to); err == nil {
						t.Fatal("the crashing move succeeded")
					}
					// Repair waits for the dead worker's lease.
					deadline := time.Now().Add(5 * time.Second)
					for {
						n, left, err := e.mover.Repair(context.Background())
						if err != nil {
							t.Fatal(err)
						}
						if n > 0 && left == 0 || time.Now().After(deadline) {
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					e.expectCell(t, "after repair", c, to, 4)
				})
			}
		}
	}
}

// Two workers moving the same cells at once: each cell moves once, the
// counts are intact.
func TestTwoWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var cs []moveenv.Cell
	for i := range 40 {
		c := moveenv.NewCell(50)
		cs = append(cs, c)
		for range i % 5 {
			e.Check(t, tiers.Enforce, c)
		}
	}
	other := *e.mover
	for _, hop := range [][2]tiers.Tier{{tiers.Hot, tiers.Warm}, {tiers.Warm, tiers.Cold}, {tiers.Cold, tiers.Hot}} {
		var wg sync.WaitGroup
		results := make([]Result, 2)
		errs := make([]error, 2)
		for w, m := range []*Mover{e.mover, &other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[w], errs[w] = m.MoveCells(context.Background(), moveenv.Refs(cs...), hop[0], hop[1])
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		seen := map[tiers.CellID]int{}
		for _, r := range results {
			for _, ref := range r.Moved {
				seen[ref.ID()]++
			}
		}
		for _, c := range cs {
			if n := seen[c.Ref().ID()]; n != 1 {
				// A cell may also be skipped by both when one worker
				// finished before the other asked: then it counts once
				// as moved and once as "already switched".
				if n == 0 || n > 2 {
					t.Fatalf("%s>%s: cell moved %d times", hop[0], hop[1], n)
				}
			}
		}
		for i, c := range cs {
			if got := e.TierOf(t, c); got != hop[1] {
				t.Fatalf("tier %q, want %q", got, hop[1])
			}
			if n := e.Count(t, c); n != int64(i%5) {
				t.Fatalf("%s>%s: count %d, want %d", hop[0], hop[1], n, i%5)
			}
		}
	}
}

// A new cell starts hot with no directory field; a cold cell costs no
// Redis but its bit in the cold filter: its directory field is gone after
// the move, and so are its hot keys; moved back to hot, it has no field.
func TestNewCellIsHotAndColdCostsOnlyItsFilterBit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	c := moveenv.NewCell(3)
	allowed := 0
	for range 5 {
		op := e.Check(t, tiers.Enforce, c)
		if op.Out[0].Tier != tiers.Hot {
			t.Fatalf("outcome tier %q, want hot", op.Out[0].Tier)
		}
		if op.Allowed() {
			allowed++
		}
	}
	if allowed != 3 || e.TierOf(t, c) != tiers.Hot || e.Count(t, c) != 3 {
		t.Fatalf("allowed %d, tier %q, count %d", allowed, e.TierOf(t, c), e.Count(t, c))
	}
	dirField := func() string {
		t.Helper()
		raws, err := e.Warm.DirRaw(ctx, moveenv.Refs(c))
		if err != nil {
			t.Fatal(err)
		}
		return raws[0]
	}
	if v := dirField(); v != "" {
		t.Fatalf("hot cell's directory field %q, want none", v)
	}
	e.Move(t, tiers.Hot, tiers.Cold, c)
	if v := dirField(); v != "" {
		t.Fatalf("cold cell's directory field %q, want none", v)
	}
	hotKeys, err := e.Hot.Export(ctx, moveenv.Refs(c))
	if err != nil || len(hotKeys) != 0 {
		t.Fatalf("cold cell still has hot keys: %v %v", hotKeys, err)
	}
	ref := c.Ref()
	if n, err := e.Warm.Client().Exists(ctx, e.Warm.HeaderKey(&ref)).Result(); err != nil || n != 1 {
		t.Fatalf("no cold filter for the cell's tag (%v)", err)
	}
	if op := e.Check(t, tiers.Enforce, c); op.Allowed() || op.Out[0].Tier != tiers.Cold {
		t.Fatalf("4th call of 3 in cold: %+v", op.Out)
	}
	e.Move(t, tiers.Cold, tiers.Hot, c)
	if v := dirField(); v != "" || e.TierOf(t, c) != tiers.Hot || e.Count(t, c) != 3 {
		t.Fatalf("back in hot: field %q, tier %q, count %d; want no field, hot, 3", v, e.TierOf(t, c), e.Count(t, c))
	}
}

// quotad's mover has no injected clock (HotMover.Now nil): moves use the
// real time.
func TestMoveWithRealClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.Clock.Set(time.Now())
	e.Hot.Now = nil
	c := moveenv.NewCell(10)
	for range 4 {
		e.Check(t, tiers.Enforce, c)
	}
	for _, hop := range [][2]tiers.Tier{{tiers.Hot, tiers.Cold}, {tiers.Cold, tiers.Warm}, {tiers.Warm, tiers.Hot}} {
		e.Move(t, hop[0], hop[1], c)
		if n := e.Count(t, c); n != 4 {
			t.Fatalf("%s>%s: count %d, want 4", hop[0], hop[1], n)
		}
	}
}

// A batch that runs longer than LeaseTTL keeps its cells: the worker renews
// its leases while it works, so a second worker (or a Repair) skips them
// instead of moving the same cells at the same time.
func TestMove_LeasesOutliveTheirTTLWhileTheBatchRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cells := []moveenv.Cell{moveenv.NewCell(50), moveenv.NewCell(50)}
	for _, c := range cells {
		e.Check(t, tiers.Enforce, c)
	}
	slow := *e.mover
	slow.LeaseTTL = 500 * time.Millisecond
	inFreeze := make(chan struct{})
	release := make(chan struct{})
	slow.Faults = afterStep(func(s Step) error {
		if s == StepFreeze {
			close(inFreeze)
			<-release // the batch stalls for 4 lease lifetimes
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		res, err := slow.MoveCells(context.Background(), moveenv.Refs(cells...), tiers.Hot, tiers.Warm)
		if err == nil && len(res.Moved) != len(cells) {
			err = fmt.Errorf("moved %d of %d", len(res.Moved), len(cells))
		}
		done <- err
	}()
	<-inFreeze
	time.Sleep(4 * slow.LeaseTTL)
	other := *e.mover
	other.LeaseTTL = slow.LeaseTTL
	res, err := other.MoveCells(context.Background(), moveenv.Refs(cells...), tiers.Hot, tiers.Cold)
	close(release)
	if err != nil || len(res.Moved) != 0 || res.Skipped != len(cells) {
		t.Fatalf("a second worker during the stalled batch: moved %d, skipped %d, err %v; want 0 moved", len(res.Moved), res.Skipped, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, c := range cells {
		if got := e.TierOf(t, c); got != tiers.Warm {
			t.Fatalf("tier %q, want warm", got)
		}
		if n := e.Count(t, c); n != 1 {
			t.Fatalf("count %d, want 1", n)
		}
	}
}

// A check on a cell that a crashed move left frozen waits at most the
// router's MovedWait, then fails as unavailable (the fail mode answers),
// instead of holding its caller until the lease lapses.
func TestRouter_FrozenCellWaitsAtMostMovedWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.Router.MovedWait = 300 * time.Millisecond
	c := moveenv.NewCell(10)
	e.takeFullProtocol(t, c)
	e.Check(t, tiers.Enforce, c)
	crashing := e.crashingMover(StepFreeze, time.Minute) // the dead worker's lease outlives the test
	if _, err := crashing.MoveCells(context.Background(), moveenv.Refs(c), tiers.Hot, tiers.Cold); err == nil {
		t.Fatal("the crashing move succeeded")
	}
	op := &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.At(e.Clock.Now())}}
	start := time.Now()
	err := e.Router.Check(context.Background(), e.Clock.Now(), []*tiers.Op{op})
	took := time.Since(start)
	if !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("check on a frozen cell: %v, want ErrUnavailable", err)
	}
	if took < 300*time.Millisecond || took > 2500*time.Millisecond {
		t.Fatalf("check on a frozen cell answered after %s, want 300 ms to 2.5 s (not the ~6 s of 400 retries)", took)
	}
}

// The mover tells the router's cold hints where it moved cells: a cell
// moved to cold is hinted (its next check skips the row lookup), one moved
// out of cold is not, and moves between hot and warm leave hints alone.
func TestMove_TeachesTheColdHints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hints := routing.NewColdHints(1024)
	e.mover.ColdHints = hints
	c := moveenv.NewCell(10)
	id := c.Ref().ID()
	for _, st := range []struct {
		from, to tiers.Tier
		hinted   bool
	}{
		{tiers.Hot, tiers.Cold, true},
		{tiers.Cold, tiers.Warm, false},
		{tiers.Warm, tiers.Cold, true},
		{tiers.Cold, tiers.Hot, false},
		{tiers.Hot, tiers.Warm, false},
	} {
		e.Move(t, st.from, st.to, c)
		if got := hints.Has(id); got != st.hinted {
			t.Fatalf("after %s>%s: hinted %v, want %v", st.from, st.to, got, st.hinted)
		}
	}
	hints.Add(id)
	e.Move(t, tiers.Warm, tiers.Hot, c)
	if !hints.Has(id) {
		t.Fatal("a move between hot and warm dropped a hint")
	}
}

// A move out of hot reads each cell's directory and cold filter in the
// step that freezes it: a batch that also holds cells of other tiers
// moves only its hot cells (a cell moved out of cold before, whose filter
// bits stay, included) and leaves the others, with their counts, where
// they are; cells already in the destination count as moved.
func TestMoveOutOfHot_MovesOnlyItsHotCells(t *testing.T) {
	t.Parallel()
	for _, to := range []tiers.Tier{tiers.Warm, tiers.Cold} {
		t.Run("hot>"+string(to), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			hot, wasCold, warm, cold := moveenv.NewCell(10), moveenv.NewCell(10), moveenv.NewCell(10), moveenv.NewCell(10)
			cells := []moveenv.Cell{hot, wasCold, warm, cold}
			for i, c := range cells {
				for range i + 1 {
					e.Check(t, tiers.Enforce, c)
				}
			}
			e.Place(t, tiers.Cold, wasCold)
			e.Move(t, tiers.Cold, tiers.Hot, wasCold)
			e.Place(t, tiers.Warm, warm)
			e.Place(t, tiers.Cold, cold)

			res, err := e.mover.MoveCells(context.Background(), moveenv.Refs(cells...), tiers.Hot, to)
			if err != nil {
				t.Fatal(err)
			}
			// The two hot cells, and the one already in the destination.
			wantMoved, wantTier := 3, map[int]tiers.Tier{0: to, 1: to, 2: tiers.Warm, 3: tiers.Cold}
			if len(res.Moved) != wantMoved || res.Skipped != len(cells)-wantMoved {
				t.Fatalf("moved %d, skipped %d; want %d and %d", len(res.Moved), res.Skipped, wantMoved, len(cells)-wantMoved)
			}
			for i, c := range cells {
				e.expectCell(t, fmt.Sprintf("cell %d", i), c, wantTier[i], int64(i+1))
			}
		})
	}
}
