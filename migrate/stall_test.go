package migrate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
						c := newCell(10)
						e.place(t, from, c)
						for range 4 {
							e.check(t, tiers.Enforce, c)
						}
						stalled, resume := make(chan struct{}), make(chan struct{})
						slow := *e.mover
						slow.AfterStep = func(s Step) error {
							if s == step {
								close(stalled)
								<-resume
							}
							return nil
						}
						moved := make(chan error, 1)
						go func() {
							_, err := slow.MoveCells(context.Background(), refsOf(c), from, to)
							moved <- err
						}()
						<-stalled
						// The lease lapses while the worker sleeps (its renewals
						// stall with it).
						ref := refsOf(c)[0]
						if err := e.mover.RDB.Del(context.Background(), e.mover.leaseKey(&ref)).Err(); err != nil {
							t.Fatal(err)
						}
						e.repair(t)
						if got := e.tierOf(t, c); got != to {
							t.Fatalf("after repair: tier %q, want %q", got, to)
						}
						for range 3 {
							if op := e.check(t, tiers.Enforce, c); op == nil || !op.Allowed() {
								t.Fatal("a check after the repair was not allowed")
							}
						}
						final := to
						if back {
							// Another move takes the cell back, where the stale
							// worker would delete its source.
							e.move(t, to, from, c)
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
