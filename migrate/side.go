package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// side is what a move needs of the tier at one of its ends (PROTOCOL.md,
// "The steps"): the source freezes (and so exports) and deletes, the
// destination imports and is switched to. Move runs every step through the
// two sides and never asks which tier is which. Every call is batched and
// safe to repeat.
type side interface {
	// Freeze freezes the cells of refs still live in this tier, so that
	// nothing counts there any more, and returns the frozen state of every
	// cell a move out of this tier has frozen, now or in an earlier run (a
	// crash may have come between the directory and the tier's own state).
	// The other cells come back as they are, for the move to tell those
	// already in the destination. The leases are checked before each write.
	Freeze(ctx context.Context, held *leases, refs []tiers.Ref) (frozenBatch, error)
	// Import writes the records as a copy that nothing routes to yet.
	Import(ctx context.Context, recs []tiers.Record) error
	// Switch makes the directory name this tier: a compare-and-set of each
	// swap from its frozen value; recs are the copies, in swaps order.
	Switch(ctx context.Context, swaps []warm.DirSwap, recs []tiers.Record, capacity func(tiers.Tag) int) error
	// Delete removes the source state of refs once the directory names the
	// destination.
	Delete(ctx context.Context, refs []tiers.Ref) error
}

// frozenBatch is what a source's Freeze found.
type frozenBatch struct {
	refs []tiers.Ref    // frozen by a move out of the tier
	old  []string       // their directory values, which the switch compares
	recs []tiers.Record // their frozen state (none for a cell without one)
	// The cells not frozen: their directory values and whether the cold
	// tier has a row (consulted only for an empty value).
	left    []tiers.Ref
	leftDir []string
	leftRow []bool
}

// newFrozenBatch is a frozenBatch with room for n frozen cells.
func newFrozenBatch(n int) frozenBatch {
	return frozenBatch{refs: make([]tiers.Ref, 0, n), old: make([]string, 0, n), recs: make([]tiers.Record, 0, n)}
}

// leave adds a cell that was not frozen.
func (b *frozenBatch) leave(r tiers.Ref, v string, row bool) {
	b.left = append(b.left, r)
	b.leftDir = append(b.leftDir, v)
	b.leftRow = append(b.leftRow, row)
}

// side returns the mover's side for a tier.
func (m *Mover) side(t tiers.Tier) (side, error) {
	switch t {
	case tiers.Hot:
		return hotSide{storeSide{m.Hot}, m}, nil
	case tiers.Warm:
		return warmSide{m}, nil
	case tiers.Cold:
		if m.Cold == nil {
			return nil, errors.New("migrate: no cold store")
		}
		return coldSide{storeSide{m.Cold}, m}, nil
	}
	return nil, fmt.Errorf("migrate: unknown tier %q", t)
}

// storeSide is what hot and cold share: a store of their own that exports,
// imports and deletes records (tiers.Mover), and "M" in the directory while
// a move out of them has a cell frozen.
type storeSide struct{ tiers.Mover }

func (storeSide) frozen(v string) bool { return v == warm.DirMoving }

func (s storeSide) export(ctx context.Context, refs []tiers.Ref, _ []string) ([]tiers.Record, error) {
	return s.Mover.Export(ctx, refs)
}

// hotSide: counter keys; hot_freeze.lua reads the directory and the cold
// filter, writes "M", renames the live keys and reads their counts in one
// step, and a switch to hot deletes the field (the imported key counts, and
// a cell without one is new).
type hotSide struct {
	storeSide
	m *Mover
}

func (h hotSide) Freeze(ctx context.Context, held *leases, refs []tiers.Ref) (frozenBatch, error) {
	refs, err := held.owned(ctx, refs)
	if err != nil {
		return frozenBatch{}, err
	}
	b := newFrozenBatch(len(refs))
	got, err := h.m.Hot.FreezeExport(ctx, refs, false)
	if err != nil {
		return b, err
	}
	var maybe []tiers.Ref
	for i, f := range got {
		if f.State == hot.MaybeCold {
			maybe = append(maybe, refs[i])
			continue
		}
		h.add(&b, refs[i], f)
	}
	if len(maybe) == 0 {
		return b, nil
	}
	// The filter may hold these cells: those with a cold row are cold
	// (invariant 2), the others hot, which only a holder of their lease
	// could change.
	rows := make([]bool, len(maybe))
	if h.m.Cold != nil {
		if rows, err = h.m.Cold.Exists(ctx, maybe); err != nil {
			return b, err
		}
	}
	var hot []tiers.Ref
	for i, row := range rows {
		if row {
			b.leave(maybe[i], "", true)
		} else {
			hot = append(hot, maybe[i])
		}
	}
	if hot, err = held.owned(ctx, hot); err != nil || len(hot) == 0 {
		return b, err
	}
	if got, err = h.m.Hot.FreezeExport(ctx, hot, true); err != nil {
		return b, err
	}
	for i, f := range got {
		h.add(&b, hot[i], f)
	}
	return b, nil
}

// add places one of FreezeExport's answers.
func (hotSide) add(b *frozenBatch, r tiers.Ref, f hot.Freeze) {
	switch f.State {
	case hot.FrozenNow:
		b.refs = append(b.refs, r)
		b.old = append(b.old, warm.DirMoving)
		if f.Record != nil {
			b.recs = append(b.recs, *f.Record)
		}
	default:
		b.leave(r, f.Dir, false)
	}
}

func (h hotSide) Switch(ctx context.Context, swaps []warm.DirSwap, _ []tiers.Record, _ func(tiers.Tag) int) error {
	return h.m.cas(ctx, swaps)
}

// warmSide: the directory field is the warm record, so freezing sets its
// Moved bit, the export decodes the frozen field, and the switch writes the
// copy; there is nothing to import or delete.
type warmSide struct{ m *Mover }

func (w warmSide) Freeze(ctx context.Context, held *leases, refs []tiers.Ref) (frozenBatch, error) {
	return w.m.freezeByDirectory(ctx, held, refs, tiers.Warm, w)
}

func (w warmSide) freeze(ctx context.Context, fresh, _ []tiers.Ref) error {
	_, err := w.m.Warm.Freeze(ctx, fresh)
	return err
}

func (warmSide) frozen(v string) bool {
	r, ok := warm.IsRecord(v)
	return ok && r.Moved
}

func (warmSide) export(_ context.Context, refs []tiers.Ref, dir []string) ([]tiers.Record, error) {
	var recs []tiers.Record
	for i, v := range dir {
		if r, ok := warm.IsRecord(v); ok {
			r.Ref = refs[i]
			recs = append(recs, r)
		}
	}
	return recs, nil
}

func (warmSide) Import(context.Context, []tiers.Record) error { return nil }

func (w warmSide) Switch(ctx context.Context, swaps []warm.DirSwap, recs []tiers.Record, _ func(tiers.Tag) int) error {
	for i := range swaps {
		v, err := warm.EncodeDirRecord(&recs[i])
		if err != nil {
			return err
		}
		swaps[i].New = v
	}
	return w.m.cas(ctx, swaps)
}

func (warmSide) Delete(context.Context, []tiers.Ref) error { return nil }

// coldSide: rows in the MySQL shards; the directory's "M" stops new routing
// to cold before the rows are frozen, and a switch to cold deletes the field
// and sets the cell's bit in its tag's cold filter in one script.
type coldSide struct {
	storeSide
	m *Mover
}

func (c coldSide) Freeze(ctx context.Context, held *leases, refs []tiers.Ref) (frozenBatch, error) {
	return c.m.freezeByDirectory(ctx, held, refs, tiers.Cold, c)
}

func (c coldSide) freeze(ctx context.Context, fresh, frozen []tiers.Ref) error {
	swaps := make([]warm.DirSwap, len(fresh))
	for i := range fresh {
		swaps[i] = warm.DirSwap{Ref: fresh[i], Old: "", New: warm.DirMoving}
	}
	if err := c.m.cas(ctx, swaps); err != nil {
		return err
	}
	return c.m.Cold.Freeze(ctx, frozen)
}

func (c coldSide) Switch(ctx context.Context, swaps []warm.DirSwap, _ []tiers.Record, capacity func(tiers.Tag) int) error {
	ok, err := c.m.Warm.SwitchToCold(ctx, swaps, capacity)
	if err != nil {
		return err
	}
	return allSwitched(swaps, ok)
}

// dirFreezer is a source whose freeze the mover drives from the directory
// (warm and cold: hot's script does it all in one step).
type dirFreezer interface {
	// freeze freezes fresh (still live in the tier) and makes sure that
	// every cell of frozen (fresh included) is.
	freeze(ctx context.Context, fresh, frozen []tiers.Ref) error
	// frozen reports whether a directory value is the mark a move out of
	// the tier leaves.
	frozen(v string) bool
	// export returns the frozen state of refs, given their directory values.
	export(ctx context.Context, refs []tiers.Ref, dir []string) ([]tiers.Record, error)
}

// freezeByDirectory is Freeze for a dirFreezer: it reads the directory,
// freezes the cells still in the tier, reads the directory again and
// exports the cells it shows frozen (any other value means another
// worker's Repair finished the move in between).
func (m *Mover) freezeByDirectory(ctx context.Context, held *leases, refs []tiers.Ref, from tiers.Tier, s dirFreezer) (frozenBatch, error) {
	var b frozenBatch
	raws, rows, err := m.dir(ctx, refs)
	if err != nil {
		return b, err
	}
	var fresh, active []tiers.Ref
	for i, v := range raws {
		switch cur := tierOf(v, rows[i]); {
		case cur == from:
			fresh = append(fresh, refs[i])
			active = append(active, refs[i])
		case cur == "" && s.frozen(v):
			active = append(active, refs[i])
		default:
			b.leave(refs[i], v, rows[i])
		}
	}
	// One lease check for the step: fresh is a part of active.
	if active, err = held.owned(ctx, active); err != nil {
		return b, err
	}
	if err := s.freeze(ctx, within(fresh, active), active); err != nil {
		return b, err
	}
	old, err := m.Warm.DirRaw(ctx, active)
	if err != nil {
		return b, err
	}
	for i, v := range old {
		if s.frozen(v) {
			b.refs = append(b.refs, active[i])
			b.old = append(b.old, v)
		}
	}
	b.recs, err = s.export(ctx, b.refs, b.old)
	return b, err
}
