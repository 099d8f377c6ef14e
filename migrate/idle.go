package migrate

import (
	"context"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// moveIdleToCold moves the idle cells of refs (hot, no counter, no field,
// no cold filter bit: tiers.HotState.Idle; states, if set, says which,
// else they are read) to cold without a lease, a journal or a freeze
// (PROTOCOL.md, "Idle cells"): an empty record for each where it has no
// row, then one atomic switch per tag that checks again that the cell is
// idle and adds it to its cold filter. The records of the cells that did
// not switch (a check counted in between) are deleted if nothing has
// counted in them. It returns the cells moved and the others, for the
// full protocol.
func (m *Mover) moveIdleToCold(ctx context.Context, refs []tiers.Ref, states []tiers.HotState, capacity func(tiers.Tag) int) (moved, rest []tiers.Ref, err error) {
	if states == nil {
		if states, err = m.Hot.States(ctx, refs); err != nil {
			return nil, nil, err
		}
	}
	var cand []tiers.Ref
	for i := range refs {
		if states[i].Idle() {
			cand = append(cand, refs[i])
		} else {
			rest = append(rest, refs[i])
		}
	}
	if len(cand) == 0 {
		return nil, rest, nil
	}
	recs := m.Hot.IdleRecords(cand)
	if err := m.Cold.InsertNew(ctx, recs); err != nil {
		return nil, nil, fmt.Errorf("idle cells: %w", err)
	}
	if err := m.step(StepIdleCopy); err != nil {
		return nil, nil, err
	}
	ok, err := m.Hot.SwitchIdleToCold(ctx, cand, capacity)
	if err != nil {
		return nil, nil, fmt.Errorf("idle cells: %w", err)
	}
	var unused []tiers.Record
	for i, switched := range ok {
		if switched {
			moved = append(moved, cand[i])
		} else {
			rest = append(rest, cand[i])
			unused = append(unused, recs[i])
		}
	}
	if len(unused) > 0 {
		if err := m.Cold.DeleteUnchanged(ctx, unused); err != nil {
			return nil, nil, fmt.Errorf("idle cells: %w", err)
		}
	}
	return moved, rest, nil
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
