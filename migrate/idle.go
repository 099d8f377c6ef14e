package migrate

import (
	"context"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// moveIdleToCold moves the idle cells of refs (hot, no counter, no field,
// no cold filter bit: tiers.HotMover.Idle) to cold without a lease, a
// journal or a freeze (PROTOCOL.md, "Idle cells"): an empty record for
// each where it has no row, then one atomic switch per tag that checks
// again that the cell is idle and adds it to its cold filter. The records
// of the cells that did not switch (a check counted in between) are
// deleted if nothing has counted in them. It returns the cells moved and
// the others, for the full protocol.
func (m *Mover) moveIdleToCold(ctx context.Context, refs []tiers.Ref, capacity func(tiers.Tag) int) (moved, rest []tiers.Ref, err error) {
	idle, err := m.Hot.Idle(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	var cand []tiers.Ref
	for i := range refs {
		if idle[i] {
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
