package warm

import (
	"context"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// This file holds the sides of a move (tiers.MoveSide) that the directory
// drives: the warm tier's, whose records are the directory's fields, and
// the cold tier's, three of whose four steps are directory writes (the "M"
// mark, the filter switch) around the cold rows' own (ColdStore, which
// cold.Store is). The hot side is hot.Side.

// TierOf is the tier a directory value names ("" while frozen). An empty
// value is cold with a cold row, else hot (a cell the router has not marked
// yet: checked before tiering, or never).
func TierOf(v string, row bool) tiers.Tier {
	rec, isRec := IsRecord(v)
	switch {
	case v == DirHot:
		return tiers.Hot
	case v == "" && row:
		return tiers.Cold
	case v == "":
		return tiers.Hot
	case isRec && !rec.Moved:
		return tiers.Warm
	}
	return ""
}

// Tiers returns the tier the directory names for each ref ("" while a
// move has it frozen); rows (nil: no cold tier) tells an empty value cold
// or hot.
func (s *Store) Tiers(ctx context.Context, refs []tiers.Ref, rows tiers.ColdRows) ([]tiers.Tier, error) {
	raws, has, err := s.dirRows(ctx, refs, rows)
	if err != nil {
		return nil, err
	}
	out := make([]tiers.Tier, len(refs))
	for i, v := range raws {
		out[i] = TierOf(v, has[i])
	}
	return out, nil
}

// dirRows reads the directory values of refs and, for the empty ones,
// whether the cold tier has a row. Only the cells their tag's cold filter
// holds are looked up in MySQL: a cell with no field and no filter bit has
// no row (migrate/PROTOCOL.md, invariant 2), so hot cells cost no MySQL
// read.
func (s *Store) dirRows(ctx context.Context, refs []tiers.Ref, rows tiers.ColdRows) ([]string, []bool, error) {
	raws, err := s.DirRaw(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	if rows == nil {
		return raws, make([]bool, len(refs)), nil
	}
	var empty []tiers.Ref
	var emptyAt []int
	for i, v := range raws {
		if v == "" {
			empty = append(empty, refs[i])
			emptyAt = append(emptyAt, i)
		}
	}
	maybe, err := s.MayBeCold(ctx, empty)
	if err != nil {
		return nil, nil, err
	}
	ask := make([]bool, len(refs))
	for k, i := range emptyAt {
		ask[i] = maybe[k]
	}
	has, err := tiers.RowsOf(ctx, rows, refs, ask)
	return raws, has, err
}

// CASAll runs directory compare-and-sets that must all succeed: under a
// move's lease nothing else changes a cell's directory.
func (s *Store) CASAll(ctx context.Context, swaps []DirSwap) error {
	ok, err := s.DirCAS(ctx, swaps)
	if err != nil {
		return err
	}
	return allSwitched(swaps, ok)
}

// allSwitched is an error naming the first swap that did not succeed.
func allSwitched(swaps []DirSwap, ok []bool) error {
	for i, b := range ok {
		if !b {
			return fmt.Errorf("directory of cell %x changed under its lease", swaps[i].ID())
		}
	}
	return nil
}

// Swaps are the compare-and-sets of refs from old to news (nil: to
// absent).
func Swaps(refs []tiers.Ref, old, news []string) []DirSwap {
	swaps := make([]DirSwap, len(refs))
	for i := range refs {
		swaps[i] = DirSwap{Ref: refs[i], Old: old[i]}
		if news != nil {
			swaps[i].New = news[i]
		}
	}
	return swaps
}

// Side is the warm tier's side of a move: the directory field is the warm
// record, so freezing sets its Moved bit, the export decodes the frozen
// field, and the switch writes the copy; there is nothing to import or
// delete.
type Side struct {
	Dir  *Store
	Rows tiers.ColdRows // nil: no cold tier
}

// Tier returns Warm.
func (Side) Tier() tiers.Tier { return tiers.Warm }

// Freeze freezes the warm records of refs (tiers.MoveSide).
func (w Side) Freeze(ctx context.Context, held tiers.Held, refs []tiers.Ref) (tiers.Frozen, error) {
	return w.Dir.freezeByDirectory(ctx, w.Rows, held, refs, warmFreezer{w.Dir})
}

// Import does nothing: the switch writes the copy.
func (Side) Import(context.Context, []tiers.Record) error { return nil }

// Switch writes the copies into the directory, from the frozen values.
func (w Side) Switch(ctx context.Context, refs []tiers.Ref, old []string, copies []tiers.Record, _ func(tiers.Tag) int) error {
	news := make([]string, len(refs))
	for i := range refs {
		v, err := EncodeDirRecord(&copies[i])
		if err != nil {
			return err
		}
		news[i] = v
	}
	return w.Dir.CASAll(ctx, Swaps(refs, old, news))
}

// Delete does nothing: the switch replaced the record.
func (Side) Delete(context.Context, []tiers.Ref) error { return nil }

// warmFreezer is the warm tier as freezeByDirectory drives it.
type warmFreezer struct{ s *Store }

func (warmFreezer) tier() tiers.Tier { return tiers.Warm }

func (w warmFreezer) freeze(ctx context.Context, fresh, _ []tiers.Ref) error {
	_, err := w.s.Freeze(ctx, fresh)
	return err
}

func (warmFreezer) frozen(v string) bool {
	r, ok := IsRecord(v)
	return ok && r.Moved
}

func (warmFreezer) export(_ context.Context, refs []tiers.Ref, dir []string) ([]tiers.Record, error) {
	var recs []tiers.Record
	for i, v := range dir {
		if r, ok := IsRecord(v); ok {
			r.Ref = refs[i]
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// ColdStore is the cold tier's rows as a move needs them (cold.Store).
type ColdStore interface {
	tiers.Mover
	tiers.ColdRows
	// Freeze sets Moved on the rows of refs (missing rows stay missing).
	Freeze(ctx context.Context, refs []tiers.Ref) error
}

// ColdSide is the cold tier's side of a move: rows in the MySQL shards;
// the directory's "M" stops new routing to cold before the rows are
// frozen, and a switch to cold deletes the field and sets the cell's bit
// in its tag's cold filter in one script (SwitchToCold).
type ColdSide struct {
	Dir  *Store
	Rows ColdStore
}

// Tier returns Cold.
func (ColdSide) Tier() tiers.Tier { return tiers.Cold }

// Freeze marks refs "M" in the directory and freezes their rows
// (tiers.MoveSide).
func (c ColdSide) Freeze(ctx context.Context, held tiers.Held, refs []tiers.Ref) (tiers.Frozen, error) {
	return c.Dir.freezeByDirectory(ctx, c.Rows, held, refs, coldFreezer(c))
}

// Import writes the copies as rows nothing routes to yet.
func (c ColdSide) Import(ctx context.Context, recs []tiers.Record) error {
	return c.Rows.Import(ctx, recs)
}

// Switch deletes the fields and sets the cells' cold filter bits.
func (c ColdSide) Switch(ctx context.Context, refs []tiers.Ref, old []string, _ []tiers.Record, capacity func(tiers.Tag) int) error {
	swaps := Swaps(refs, old, nil)
	ok, err := c.Dir.SwitchToCold(ctx, swaps, capacity)
	if err != nil {
		return err
	}
	return allSwitched(swaps, ok)
}

// Delete deletes the rows.
func (c ColdSide) Delete(ctx context.Context, refs []tiers.Ref) error {
	return c.Rows.Delete(ctx, refs)
}

// coldFreezer is the cold tier as freezeByDirectory drives it.
type coldFreezer ColdSide

func (coldFreezer) tier() tiers.Tier { return tiers.Cold }

func (c coldFreezer) freeze(ctx context.Context, fresh, frozen []tiers.Ref) error {
	swaps := make([]DirSwap, len(fresh))
	for i := range fresh {
		swaps[i] = DirSwap{Ref: fresh[i], Old: "", New: DirMoving}
	}
	if err := c.Dir.CASAll(ctx, swaps); err != nil {
		return err
	}
	return c.Rows.Freeze(ctx, frozen)
}

func (coldFreezer) frozen(v string) bool { return v == DirMoving }

func (c coldFreezer) export(ctx context.Context, refs []tiers.Ref, _ []string) ([]tiers.Record, error) {
	return c.Rows.Export(ctx, refs)
}

// dirFreezer is a source whose freeze the directory drives (warm and
// cold: hot's script does it all in one step).
type dirFreezer interface {
	tier() tiers.Tier
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
func (s *Store) freezeByDirectory(ctx context.Context, rows tiers.ColdRows, held tiers.Held, refs []tiers.Ref, f dirFreezer) (tiers.Frozen, error) {
	var b tiers.Frozen
	raws, has, err := s.dirRows(ctx, refs, rows)
	if err != nil {
		return b, err
	}
	var fresh, active []tiers.Ref
	for i, v := range raws {
		switch cur := TierOf(v, has[i]); {
		case cur == f.tier():
			fresh = append(fresh, refs[i])
			active = append(active, refs[i])
		case cur == "" && f.frozen(v):
			active = append(active, refs[i])
		default:
			b.Leave(refs[i], cur)
		}
	}
	// One lease check for the step: fresh is a part of active.
	if active, err = held(ctx, active); err != nil {
		return b, err
	}
	if err := f.freeze(ctx, within(fresh, active), active); err != nil {
		return b, err
	}
	old, err := s.DirRaw(ctx, active)
	if err != nil {
		return b, err
	}
	for i, v := range old {
		if f.frozen(v) {
			b.Refs = append(b.Refs, active[i])
			b.Old = append(b.Old, v)
		}
	}
	b.Recs, err = f.export(ctx, b.Refs, b.Old)
	return b, err
}

// within returns the refs of part that are also in of.
func within(part, of []tiers.Ref) []tiers.Ref {
	in := make(map[tiers.CellID]bool, len(of))
	for i := range of {
		in[of[i].ID()] = true
	}
	var out []tiers.Ref
	for i := range part {
		if in[part[i].ID()] {
			out = append(out, part[i])
		}
	}
	return out
}
