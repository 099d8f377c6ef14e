package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// quietMove is what moveQuietToCold did.
type quietMove struct {
	moved []tiers.Ref // now cold: the idle cells first, then those with a count
	idle  int         // of moved
	rest  []tiers.Ref // for the full protocol
}

// moveQuietToCold moves the quiet cells of refs (hot with no field, no
// cold filter bit and no counter of the next window: tiers.HotState.Quiet;
// states, if set, says which, else they are read) to cold without a
// journal or a freeze (PROTOCOL.md, "Quiet cells"): the cold record of
// what each holds (for an idle cell an empty one, where it has no row),
// then one atomic switch per tag that checks again that the counters hold
// what was copied, deletes them and adds the cells to the cold filter. The
// records of the cells that did not switch (a check counted in between)
// are deleted while nothing has counted in them. Cells with a count are
// moved under their leases; idle ones need none.
func (m *Mover) moveQuietToCold(ctx context.Context, refs []tiers.Ref, states []tiers.HotState, capacity func(tiers.Tag) int) (quietMove, error) {
	var res quietMove
	var err error
	if states == nil {
		if states, err = m.Hot.States(ctx, refs); err != nil {
			return res, err
		}
	}
	var idle, counted []tiers.Ref
	var idleStates, countedStates []tiers.HotState
	for i := range refs {
		switch s := &states[i]; {
		case s.Idle():
			idle, idleStates = append(idle, refs[i]), append(idleStates, *s)
		case s.Quiet():
			counted, countedStates = append(counted, refs[i]), append(countedStates, *s)
		default:
			res.rest = append(res.rest, refs[i])
		}
	}
	var held *leases
	stopped := false
	if len(counted) > 0 {
		if held, err = m.lease(ctx, counted); err != nil {
			return res, err
		}
		defer func() {
			if stopped {
				held.abandon() // a simulated crash keeps its leases
			} else {
				held.release()
			}
		}()
		counted, countedStates = keepHeld(held, counted, countedStates, &res.rest)
	}
	err = m.quietBatch(ctx, idle, idleStates, counted, countedStates, held, capacity, &res)
	stopped = errors.Is(err, errStopped)
	return res, err
}

// keepHeld returns the refs (and their states) whose lease held has, and
// adds the others to rest.
func keepHeld(held *leases, refs []tiers.Ref, states []tiers.HotState, rest *[]tiers.Ref) ([]tiers.Ref, []tiers.HotState) {
	if len(held.refs) == len(refs) {
		return refs, states
	}
	in := make(map[tiers.Ref]bool, len(held.refs))
	for _, r := range held.refs {
		in[r] = true
	}
	var keptRefs []tiers.Ref
	var keptStates []tiers.HotState
	for i, r := range refs {
		if in[r] {
			keptRefs, keptStates = append(keptRefs, r), append(keptStates, states[i])
		} else {
			*rest = append(*rest, r)
		}
	}
	return keptRefs, keptStates
}

// quietBatch copies, switches and cleans up the idle cells and the held
// counted cells of one batch (moveQuietToCold).
func (m *Mover) quietBatch(ctx context.Context, idle []tiers.Ref, idleStates []tiers.HotState, counted []tiers.Ref, countedStates []tiers.HotState, held *leases, capacity func(tiers.Tag) int, res *quietMove) error {
	nIdle := len(idle)
	cand := append(idle, counted...)
	if len(cand) == 0 {
		return nil
	}
	states := append(idleStates, countedStates...)
	recs, err := m.Hot.QuietRecords(cand, states)
	if err != nil {
		return err
	}
	if err := m.Cold.InsertNew(ctx, recs[:nIdle]); err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	if err := m.Cold.Import(ctx, recs[nIdle:]); err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	if err := m.step(StepQuietCopy); err != nil {
		return err
	}
	// A worker that stalled past a lease since it took it switches no
	// counted cell and deletes no record of one: the cell may have been
	// moved away and back meanwhile, its counter holding the same value
	// and its cold row another move's.
	lapsed, err := lapsedOf(ctx, held, cand[nIdle:])
	if err != nil {
		return err
	}
	var try []int // indexes into cand
	for i := range cand {
		if i >= nIdle && lapsed[i-nIdle] {
			res.rest = append(res.rest, cand[i])
		} else {
			try = append(try, i)
		}
	}
	ok, err := m.Hot.SwitchQuietToCold(ctx, pick(cand, try), pick(states, try), capacity)
	if err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	var unswitched []int // indexes into cand
	for k, i := range try {
		if !ok[k] {
			unswitched = append(unswitched, i)
			continue
		}
		res.moved = append(res.moved, cand[i])
		if i < nIdle {
			res.idle++
		}
	}
	return m.dropUnused(ctx, held, cand, recs, nIdle, unswitched, res)
}

// dropUnused hands the cells of cand at unswitched (those that did not
// switch) to the full protocol, and deletes their records while they hold
// what the move wrote; a counted cell's (the ones from nIdle on) only
// while its lease is still held (see quietBatch).
func (m *Mover) dropUnused(ctx context.Context, held *leases, cand []tiers.Ref, recs []tiers.Record, nIdle int, unswitched []int, res *quietMove) error {
	var counted []tiers.Ref
	for _, i := range unswitched {
		if i >= nIdle {
			counted = append(counted, cand[i])
		}
	}
	lapsed, err := lapsedOf(ctx, held, counted)
	if err != nil {
		return err
	}
	var unused []tiers.Record
	k := 0
	for _, i := range unswitched {
		res.rest = append(res.rest, cand[i])
		if i >= nIdle {
			k++
			if lapsed[k-1] {
				continue
			}
		}
		unused = append(unused, recs[i])
	}
	if len(unused) == 0 {
		return nil
	}
	if err := m.Cold.DeleteUnchanged(ctx, unused); err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	return nil
}

// pick returns the elements of s at the indexes at.
func pick[T any](s []T, at []int) []T {
	out := make([]T, len(at))
	for k, i := range at {
		out[k] = s[i]
	}
	return out
}

// lapsedOf reports, for each of refs, whether its lease is no longer
// held's (nothing to check when there are none).
func lapsedOf(ctx context.Context, held *leases, refs []tiers.Ref) ([]bool, error) {
	out := make([]bool, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	kept, err := held.owned(ctx, refs)
	if err != nil {
		return nil, err
	}
	in := make(map[tiers.Ref]bool, len(kept))
	for _, r := range kept {
		in[r] = true
	}
	for i := range refs {
		out[i] = !in[refs[i]]
	}
	return out, nil
}

// statesOf returns the tier of each ref (as TierOf) and where it stands
// (tiers.HotMover.States): one script call, and a cold lookup of the cells
// with no field and no counter whose tag's filter may hold them.
func (m *Mover) statesOf(ctx context.Context, refs []tiers.Ref) ([]tiers.Tier, []tiers.HotState, error) {
	states, err := m.Hot.States(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	ask := make([]bool, len(refs))
	for i := range states {
		ask[i] = states[i].MaybeCold
	}
	rows, err := m.coldRows(ctx, refs, ask)
	if err != nil {
		return nil, nil, err
	}
	out := make([]tiers.Tier, len(refs))
	for i := range states {
		out[i] = tierOf(states[i].Dir, rows[i])
	}
	return out, states, nil
}
