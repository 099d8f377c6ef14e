package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// side is what a move needs of the tier at one of its ends (PROTOCOL.md,
// "The steps"): the source freezes, exports and deletes, the destination
// imports and is switched to. Move runs every step through the two sides
// and never asks which tier is which. Every call is batched and safe to
// repeat.
type side interface {
	// Freeze freezes the cells of fresh (still live in the tier) so that
	// nothing counts there any more, and makes sure that every cell of
	// frozen (fresh included) is: a crash may have come between the
	// directory and the tier's own state.
	Freeze(ctx context.Context, fresh, frozen []tiers.Ref) error
	// Frozen reports whether a directory value is the mark a move out of
	// this tier leaves.
	Frozen(v string) bool
	// Export returns the frozen state of refs, given their directory values.
	Export(ctx context.Context, refs []tiers.Ref, dir []string) ([]tiers.Record, error)
	// Import writes the records as a copy that nothing routes to yet.
	Import(ctx context.Context, recs []tiers.Record) error
	// Switch makes the directory name this tier: a compare-and-set of each
	// swap from its frozen value; recs are the copies, in swaps order.
	Switch(ctx context.Context, swaps []tiers.DirSwap, recs []tiers.Record, capacity func(tiers.Tag) int) error
	// Delete removes the source state of refs once the directory names the
	// destination.
	Delete(ctx context.Context, refs []tiers.Ref) error
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

func (storeSide) Frozen(v string) bool { return v == tiers.DirMoving }

func (s storeSide) Export(ctx context.Context, refs []tiers.Ref, _ []string) ([]tiers.Record, error) {
	return s.Mover.Export(ctx, refs)
}

// hotSide: counter keys; hot_freeze.lua writes "M" and renames the live
// keys in one step, and a switch to hot deletes the field (the imported key
// counts, and a cell without one is new).
type hotSide struct {
	storeSide
	m *Mover
}

func (h hotSide) Freeze(ctx context.Context, fresh, _ []tiers.Ref) error {
	ok, err := h.m.Hot.Freeze(ctx, fresh)
	if err != nil {
		return err
	}
	for i, b := range ok {
		if !b {
			return fmt.Errorf("freeze: cell %x changed tier under its lease", fresh[i].ID())
		}
	}
	return nil
}

func (h hotSide) Switch(ctx context.Context, swaps []tiers.DirSwap, _ []tiers.Record, _ func(tiers.Tag) int) error {
	return h.m.cas(ctx, swaps)
}

// warmSide: the directory field is the warm record, so freezing sets its
// Moved bit, the export decodes the frozen field, and the switch writes the
// copy; there is nothing to import or delete.
type warmSide struct{ m *Mover }

func (w warmSide) Freeze(ctx context.Context, fresh, _ []tiers.Ref) error {
	_, err := w.m.Warm.Freeze(ctx, fresh)
	return err
}

func (warmSide) Frozen(v string) bool {
	r, ok := tiers.IsWarmRecord(v)
	return ok && r.Moved
}

func (warmSide) Export(_ context.Context, refs []tiers.Ref, dir []string) ([]tiers.Record, error) {
	var recs []tiers.Record
	for i, v := range dir {
		if r, ok := tiers.IsWarmRecord(v); ok {
			r.Ref = refs[i]
			recs = append(recs, r)
		}
	}
	return recs, nil
}

func (warmSide) Import(context.Context, []tiers.Record) error { return nil }

func (w warmSide) Switch(ctx context.Context, swaps []tiers.DirSwap, recs []tiers.Record, _ func(tiers.Tag) int) error {
	for i := range swaps {
		v, err := tiers.EncodeDirRecord(&recs[i])
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

func (c coldSide) Freeze(ctx context.Context, fresh, frozen []tiers.Ref) error {
	swaps := make([]tiers.DirSwap, len(fresh))
	for i := range fresh {
		swaps[i] = tiers.DirSwap{Ref: fresh[i], Old: "", New: tiers.DirMoving}
	}
	if err := c.m.cas(ctx, swaps); err != nil {
		return err
	}
	return c.m.Cold.Freeze(ctx, frozen)
}

func (c coldSide) Switch(ctx context.Context, swaps []tiers.DirSwap, _ []tiers.Record, capacity func(tiers.Tag) int) error {
	ok, err := c.m.Warm.SwitchToCold(ctx, swaps, capacity)
	if err != nil {
		return err
	}
	return allSwitched(swaps, ok)
}
