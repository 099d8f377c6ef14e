package migrate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/tiers"
)

// A worker that stalls after a step (a long GC pause, SIGSTOP, a hung
// network) long enough for its lease to lapse sees another worker's Repair
// finish its move, calls count in the new tier, and then it wakes up and
// carries on with its stale steps, possibly after the cell has even moved
// back. Every step must be safe to run late: the count stays exact, the
// cell stays where the last finished move put it, and routable.
func TestMove_StalledWorkerResumingAfterRepairLosesNoCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, from := range allTiers {
		for _, to := range allTiers {
			if from == to {
				continue
			}
			for step := StepJournal; step <= StepDelete; step++ {
				for _, back := range []bool{false, true} {
					name := fmt.Sprintf("%s>%s/stalled-after-%s", from, to, step)
					if back {
						name += "/moved-back"
					}
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						e := e.ownJournal()
						c := moveenv.NewCell(10)
						e.Place(t, from, c)
						if from == tiers.Hot && to == tiers.Cold {
							e.takeFullProtocol(t, c) // the quiet move: TestMoveQuietToCold_StalledWorkerLosesNoCount
						}
						for range 4 {
							e.Check(t, tiers.Enforce, c)
						}
						stalled, resume := make(chan struct{}), make(chan struct{})
						slow := *e.mover
						slow.Faults = afterStep(func(s Step) error {
							if s == step {
								close(stalled)
								<-resume
							}
							return nil
						})
						moved := make(chan error, 1)
						go func() {
							_, err := slow.MoveCells(context.Background(), moveenv.Refs(c), from, to)
							moved <- err
						}()
						select {
						case <-stalled:
						case err := <-moved:
							t.Fatalf("the move to stall ended before its step %s: %v", step, err)
						}
						// The lease lapses while the worker sleeps (its renewals
						// stall with it).
						ref := moveenv.Refs(c)[0]
						if err := e.mover.RDB.Del(context.Background(), e.mover.leaseKey(&ref)).Err(); err != nil {
							t.Fatal(err)
						}
						e.repair(t)
						if got := e.TierOf(t, c); got != to {
							t.Fatalf("after repair: tier %q, want %q", got, to)
						}
						for range 3 {
							if op := e.Check(t, tiers.Enforce, c); op == nil || !op.Allowed() {
								t.Fatal("a check after the repair was not allowed")
							}
						}
						final := to
						if back {
							// Another move takes the cell back, where the stale
							// worker would delete its source.
							e.Move(t, to, from, c)
							final = from
						}
						close(resume)
						if err := <-moved; err != nil && !errors.Is(err, ErrLeased) {
							t.Logf("the stale worker's move ended with: %v", err)
						}
						e.repair(t) // whatever the stale worker left
						e.expectCell(t, "after the stale worker", c, final, 7)
					})
				}
			}
		}
	}
}

// repair runs Repair until the journal is empty (at most 5 s).
func (e *env) repair(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, left, err := e.mover.Repair(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal still holds %d cells after 5 s of repair", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Repair reads the journal, then leases the cells it found. By then a
// cell's move may be over (finished by its worker or another Repair) and
// even reversed; a Repair that rolled its stale snapshot forward would
// move a cell nobody asked to move (and, for that moment, hold a lease a
// real move then skipped on). Under the lease it moves only the cells
// whose journal entry still reads its direction.
func TestRepair_StaleJournalSnapshotMovesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name  string
		entry string // the cell's journal entry when Repair leases it; "" none
	}{
		{"move-finished", ""},
		{"other-direction-journaled", "warm>hot"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := e.ownJournal()
			c := moveenv.NewCell(10)
			for range 3 {
				e.Check(t, tiers.Enforce, c)
			}
			ref := c.Ref()
			if tc.entry != "" {
				if err := e.mover.RDB.HSet(context.Background(), e.mover.journalKey(), EncodeRef(&ref), tc.entry).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// What Repair does with a snapshot that read "hot>warm".
			res, err := e.mover.moveCells(context.Background(), moveenv.Refs(c), tiers.Hot, tiers.Warm, moveOpts{journaled: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Moved) != 0 || res.Skipped != 0 {
				t.Fatalf("moved %d, skipped %d; want 0 and 0", len(res.Moved), res.Skipped)
			}
			got, err := e.mover.RDB.HGet(context.Background(), e.mover.journalKey(), EncodeRef(&ref)).Result()
			if err != nil && tc.entry != "" || got != tc.entry {
				t.Fatalf("journal entry %q (%v), want %q", got, err, tc.entry)
			}
			if n, err := e.mover.RDB.Exists(context.Background(), e.mover.leaseKey(&ref)).Result(); err != nil || n != 0 {
				t.Fatalf("lease left behind (%d, %v)", n, err)
			}
			e.expectCell(t, "after the stale repair", c, tiers.Hot, 3)
		})
	}
}
