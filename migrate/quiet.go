package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// quietMove is what moveQuietToCold did.
type quietMove struct {
	moved []tiers.Ref // now cold: the idle cells first, then those with a count
	idle  int         // of moved
	rest  []tiers.Ref // for the full protocol
}

// quietCell is a cell of a quiet move: where States found it, and the cold
// record the move writes for it.
type quietCell struct {
	ref   tiers.Ref
	state tiers.HotState
	rec   tiers.Record
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
	var held *leases
	stopped := false
	if len(cand) > idle {
		if held, err = m.lease(ctx, quietRefs(cand[idle:])); err != nil {
			return res, err
		}
		defer func() {
			if stopped {
				held.abandon() // a simulated crash keeps its leases
			} else {
				held.release()
			}
		}()
		counted := keepIn(cand[idle:], refSet(held.refs), &res.rest)
		cand = cand[:idle+len(counted)]
	}
	err = m.quietBatch(ctx, cand, idle, held, capacity, &res)
	stopped = errors.Is(err, errStopped)
	return res, err
}

// inTime reports whether a quiet cell may take the quiet move: its counter
// (for an idle cell, the 0 States held it with) lasts a LeaseTTL past now,
// so that the record the move copies is written while that counter keeps
// checks off it (a stall of a LeaseTTL between here and the copy aside, as
// the leases assume; PROTOCOL.md, "Quiet cells"). The others take the full
// protocol.
func (m *Mover) inTime(r *tiers.Ref, s *tiers.HotState, now time.Time) bool {
	return s.WindowEnd(r).Sub(now) > m.leaseTTL()
}

// quietBatch copies, switches and cleans up the quiet cells of one batch
// (moveQuietToCold): cand's first idle cells are idle, the others counted
// and held.
func (m *Mover) quietBatch(ctx context.Context, cand []quietCell, idle int, held *leases, capacity func(tiers.Tag) int, res *quietMove) error {
	if len(cand) == 0 {
		return nil
	}
	recs, err := m.Hot.QuietRecords(quietRefs(cand), quietStates(cand))
	if err != nil {
		return err
	}
	for i := range cand {
		cand[i].rec = recs[i]
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
	// A worker that stalled past a lease since it took it switches no
	// counted cell and deletes no record of one: the cell may have been
	// moved away and back meanwhile, its counter holding the same value
	// and its cold row another move's.
	counted, err := stillOwned(ctx, held, cand[idle:], &res.rest)
	if err != nil {
		return err
	}
	cand = cand[:idle+len(counted)]
	ok, err := m.Hot.SwitchQuietToCold(ctx, quietRefs(cand), quietStates(cand), capacity)
	if err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	var unusedIdle, unusedCounted []quietCell
	for i, c := range cand {
		switch {
		case ok[i]:
			res.moved = append(res.moved, c.ref)
			if i < idle {
				res.idle++
			}
		case i < idle:
			unusedIdle = append(unusedIdle, c)
		default:
			unusedCounted = append(unusedCounted, c)
		}
	}
	if unusedCounted, err = stillOwned(ctx, held, unusedCounted, &res.rest); err != nil {
		return err
	}
	return m.dropUnused(ctx, slices.Concat(unusedIdle, unusedCounted), res)
}

// dropUnused hands cells that did not switch to the full protocol, and
// deletes their records while they hold what the move wrote.
func (m *Mover) dropUnused(ctx context.Context, unused []quietCell, res *quietMove) error {
	if len(unused) == 0 {
		return nil
	}
	recs := make([]tiers.Record, len(unused))
	for i, c := range unused {
		res.rest = append(res.rest, c.ref)
		recs[i] = c.rec
	}
	if err := m.Cold.DeleteUnchanged(ctx, recs); err != nil {
		return fmt.Errorf("quiet cells: %w", err)
	}
	return nil
}

// stillOwned keeps, in place (keepIn), the cells whose lease held still
// has (one check in Redis), and adds the others' refs to rest.
func stillOwned(ctx context.Context, held *leases, cells []quietCell, rest *[]tiers.Ref) ([]quietCell, error) {
	if len(cells) == 0 {
		return cells, nil
	}
	kept, err := held.owned(ctx, quietRefs(cells))
	if err != nil {
		return nil, err
	}
	return keepIn(cells, refSet(kept), rest), nil
}

// keepIn keeps the cells whose ref is in set, in order and in place (it
// returns them, a prefix of cells), and adds the others' refs to rest.
func keepIn(cells []quietCell, set map[tiers.Ref]bool, rest *[]tiers.Ref) []quietCell {
	kept := cells[:0]
	for _, c := range cells {
		if set[c.ref] {
			kept = append(kept, c)
		} else {
			*rest = append(*rest, c.ref)
		}
	}
	return kept
}

// quietStates returns the cells' states.
func quietStates(cells []quietCell) []tiers.HotState {
	out := make([]tiers.HotState, len(cells))
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

// statesOf returns the tier of each ref (as TierOf) and where it stands
// (tiers.HotMover.States, holding the idle cells of toCold): one script
// call, and a cold lookup of the cells with no field and no counter whose
// tag's filter may hold them.
func (m *Mover) statesOf(ctx context.Context, refs []tiers.Ref, toCold []bool) ([]tiers.Tier, []tiers.HotState, error) {
	states, err := m.Hot.States(ctx, refs, toCold)
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
