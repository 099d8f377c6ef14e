package migrate

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// quietMove is what moveQuietToCold did.
type quietMove struct {
	moved []tiers.Ref // now cold: the idle cells first, then those with a count
	idle  int         // of moved
	rest  []tiers.Ref // for the full protocol
}

// quietCell is a cell of a quiet move and where States found it.
type quietCell struct {
	ref   tiers.Ref
	state hot.State
}

// moveQuietToCold moves the quiet cells of refs (hot with no field, no
// cold filter bit and no counter of the next window: hot.State.Quiet;
// states, if set, says which, else they are read) to cold without a
// journal, a freeze or a lease (PROTOCOL.md, "Quiet cells"): the cold
// record of what each holds (for an idle cell an empty one, where it has
// no row), then one atomic switch per tag that checks again that the
// counters hold what was copied and that a cell with a count is still not
// in the filter, deletes the counters and adds the cells to the filter.
// The records of the idle cells that did not switch (a check counted in
// between) are deleted while nothing has counted in them; those of cells
// with a count are left, as a stopped quiet move leaves them, for the full
// protocol to replace.
func (m *Mover) moveQuietToCold(ctx context.Context, refs []tiers.Ref, states []hot.State, capacity func(tiers.Tag) int) (quietMove, error) {
	var res quietMove
	var err error
	if states == nil {
		if states, err = m.Hot.States(ctx, refs, slices.Repeat([]bool{true}, len(refs))); err != nil {
			return res, err
		}
	}
	// The quiet cells in one slice, the idle ones first (quietBatch); an
	// idle cell only if States held it.
	cand := make([]quietCell, 0, len(refs))
	var counted []quietCell
	now := m.now()
	for i, s := range states {
		switch {
		case !s.Quiet() || s.Idle() && !s.Held || !m.inTime(&refs[i], &s, now):
			res.rest = append(res.rest, refs[i])
		case s.Idle():
			cand = append(cand, quietCell{ref: refs[i], state: s})
		default:
			counted = append(counted, quietCell{ref: refs[i], state: s})
		}
	}
	idle := len(cand)
	cand = append(cand, counted...)
	return res, m.quietBatch(ctx, cand, idle, capacity, &res)
}

// inTime reports whether a quiet cell may take the quiet move: its counter
// (for an idle cell, the 0 States held it with) lasts a LeaseTTL past now,
// so that the record the move copies is written while that counter keeps
// checks off it (a stall of a LeaseTTL between here and the copy aside, as
// the leases assume; PROTOCOL.md, "Quiet cells"). The others take the full
// protocol.
func (m *Mover) inTime(r *tiers.Ref, s *hot.State, now time.Time) bool {
	return s.WindowEnd(r).Sub(now) > m.leaseTTL()
}

// quietBatch copies, switches and cleans up the quiet cells of one batch
// (moveQuietToCold): cand's first idle cells are idle, the others counted.
func (m *Mover) quietBatch(ctx context.Context, cand []quietCell, idle int, capacity func(tiers.Tag) int, res *quietMove) error {
	if len(cand) == 0 {
		return nil
	}
	recs, err := m.Hot.QuietRecords(quietRefs(cand), quietStates(cand))
	if err != nil {
		return err
	}
	if err := m.Cold.InsertNew(ctx, recs[:idle]); err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	if err := m.Cold.Import(ctx, recs[idle:]); err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	if err := m.step(StepQuietCopy); err != nil {
		return err
	}
	ok, err := m.Hot.SwitchQuietToCold(ctx, quietRefs(cand), quietStates(cand), capacity)
	if err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	var unused []tiers.Record // of idle cells
	for i, c := range cand {
		if ok[i] {
			res.moved = append(res.moved, c.ref)
			if i < idle {
				res.idle++
			}
			continue
		}
		res.rest = append(res.rest, c.ref)
		// A counted cell's record is left: it may be byte for byte
		// another move's, which switched the cell meanwhile (PROTOCOL.md).
		if i < idle {
			unused = append(unused, recs[i])
		}
	}
	if len(unused) == 0 {
		return nil
	}
	if err := m.Cold.DeleteUnchanged(ctx, unused); err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	return nil
}

// quietStates returns the cells' states.
func quietStates(cells []quietCell) []hot.State {
	out := make([]hot.State, len(cells))
	for i := range cells {
		out[i] = cells[i].state
	}
	return out
}

// quietRefs returns the cells' refs.
func quietRefs(cells []quietCell) []tiers.Ref {
	out := make([]tiers.Ref, len(cells))
	for i := range cells {
		out[i] = cells[i].ref
	}
	return out
}

// StatesOf returns the tier of each ref (as TierOf) and where it stands
// (hot.Mover.States, holding the idle cells of toCold): one script call,
// and a cold lookup of the cells with no field and no counter whose tag's
// filter may hold them (hot.Side.Tiers).
func (m *Mover) StatesOf(ctx context.Context, refs []tiers.Ref, toCold []bool) ([]tiers.Tier, []hot.State, error) {
	return m.hotSide().Tiers(ctx, refs, toCold)
}
