package hot

import (
	"context"

	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
)

// Side is the hot tier's side of a move (tiers.MoveSide): counter keys;
// hot_freeze.lua reads the directory and the cold filter, writes "M",
// renames the live keys and reads their counts in one step
// (FreezeExport), and a switch to hot deletes the field (the imported key
// counts, and a cell without one is new). Export, Import and Delete are
// the Mover's.
type Side struct {
	*Mover
	Rows tiers.ColdRows // nil: no cold tier
}

// Freeze freezes the hot cells of refs (tiers.MoveSide).
func (h Side) Freeze(ctx context.Context, held tiers.Held, refs []tiers.Ref) (tiers.Frozen, error) {
	refs, err := held(ctx, refs)
	if err != nil {
		return tiers.Frozen{}, err
	}
	b := tiers.NewFrozen(len(refs))
	got, err := h.FreezeExport(ctx, refs, false)
	if err != nil {
		return b, err
	}
	var maybe []tiers.Ref
	for i, f := range got {
		if f.State == MaybeCold {
			maybe = append(maybe, refs[i])
			continue
		}
		addFrozen(&b, refs[i], f)
	}
	if len(maybe) == 0 {
		return b, nil
	}
	// The filter may hold these cells: those with a cold row are cold
	// (invariant 2), the others hot, which only a holder of their lease
	// could change.
	rows := make([]bool, len(maybe))
	if h.Rows != nil {
		if rows, err = h.Rows.Exists(ctx, maybe); err != nil {
			return b, err
		}
	}
	var hot []tiers.Ref
	for i, row := range rows {
		if row {
			b.Leave(maybe[i], tiers.Cold)
		} else {
			hot = append(hot, maybe[i])
		}
	}
	if hot, err = held(ctx, hot); err != nil || len(hot) == 0 {
		return b, err
	}
	if got, err = h.FreezeExport(ctx, hot, true); err != nil {
		return b, err
	}
	for i, f := range got {
		addFrozen(&b, hot[i], f)
	}
	return b, nil
}

// addFrozen places one of FreezeExport's answers.
func addFrozen(b *tiers.Frozen, r tiers.Ref, f Freeze) {
	switch f.State {
	case FrozenNow:
		b.Refs = append(b.Refs, r)
		b.Old = append(b.Old, warm.DirMoving)
		if f.Record != nil {
			b.Recs = append(b.Recs, *f.Record)
		}
	default:
		b.Leave(r, warm.TierOf(f.Dir, false))
	}
}

// Switch deletes the directory fields, from the frozen values.
func (h Side) Switch(ctx context.Context, refs []tiers.Ref, old []string, _ []tiers.Record, _ func(tiers.Tag) int) error {
	return h.Warm.CASAll(ctx, warm.Swaps(refs, old, nil))
}

// Tiers returns the tier of each ref (as warm.Store.Tiers) and where it
// stands (States, holding the idle cells of toCold): one script call, and
// a cold lookup of the cells with no field and no counter whose tag's
// filter may hold them.
func (h Side) Tiers(ctx context.Context, refs []tiers.Ref, toCold []bool) ([]tiers.Tier, []State, error) {
	states, err := h.States(ctx, refs, toCold)
	if err != nil {
		return nil, nil, err
	}
	ask := make([]bool, len(refs))
	for i := range states {
		ask[i] = states[i].MaybeCold
	}
	rows, err := tiers.RowsOf(ctx, h.Rows, refs, ask)
	if err != nil {
		return nil, nil, err
	}
	out := make([]tiers.Tier, len(refs))
	for i := range states {
		out[i] = warm.TierOf(states[i].Dir, rows[i])
	}
	return out, states, nil
}
