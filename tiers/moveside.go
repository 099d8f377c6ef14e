package tiers

import "context"

// MoveSide is what a move needs of the tier at one of its ends
// (migrate/PROTOCOL.md, "The steps"): the source freezes (and so exports)
// and deletes, the destination imports and is switched to. Package
// migrate runs every step of every move through the two sides and never
// asks which tier is which; hot.Side, warm.Side and warm.ColdSide are the
// three. Every call is batched and safe to repeat.
type MoveSide interface {
	Tier() Tier
	// Freeze freezes the cells of refs still live in this tier, so that
	// nothing counts there any more, and returns the frozen state of every
	// cell a move out of this tier has frozen, now or in an earlier run (a
	// crash may have come between the directory and the tier's own state).
	// The other cells come back as they are, for the move to tell those
	// already in the destination. held is checked before each write.
	Freeze(ctx context.Context, held Held, refs []Ref) (Frozen, error)
	// Import writes the records as a copy that nothing routes to yet.
	Import(ctx context.Context, recs []Record) error
	// Switch makes the directory name this tier: a compare-and-set of each
	// of refs from its frozen directory value old[i]; copies are the
	// imported records, in refs order. capacity (nil: none) estimates per
	// tag how many cells are still to go cold (a cold filter's layer size).
	Switch(ctx context.Context, refs []Ref, old []string, copies []Record, capacity func(Tag) int) error
	// Delete removes the source state of refs once the directory names the
	// destination.
	Delete(ctx context.Context, refs []Ref) error
}

// Held keeps the refs whose move leases are still the mover's (in refs
// order): a side calls it right before each write, so that a worker that
// stalled past its leases writes nothing over another's finished move.
type Held func(ctx context.Context, refs []Ref) ([]Ref, error)

// Frozen is what a source's Freeze found.
type Frozen struct {
	Refs []Ref    // frozen by a move out of the tier
	Old  []string // their directory values, which the switch compares
	Recs []Record // their frozen state (none for a cell without one)
	// Left are the cells not frozen, and the tier the directory names for
	// each ("" while another move has it frozen).
	Left   []Ref
	LeftIn []Tier
}

// NewFrozen is a Frozen with room for n frozen cells.
func NewFrozen(n int) Frozen {
	return Frozen{Refs: make([]Ref, 0, n), Old: make([]string, 0, n), Recs: make([]Record, 0, n)}
}

// Leave adds a cell that was not frozen, in tier t.
func (b *Frozen) Leave(r Ref, t Tier) {
	b.Left = append(b.Left, r)
	b.LeftIn = append(b.LeftIn, t)
}

// ColdRows says which cells the cold tier has a row for (cold.Store):
// the directory needs it to tell a cell with no field cold or hot.
type ColdRows interface {
	// Exists reports, per ref, whether the cold tier has its row.
	Exists(ctx context.Context, refs []Ref) ([]bool, error)
}

// RowsOf reports, for each ref whose ask is set, whether rows has its row
// (false for the others, and for all when rows is nil): one lookup of the
// asked refs.
func RowsOf(ctx context.Context, rows ColdRows, refs []Ref, ask []bool) ([]bool, error) {
	out := make([]bool, len(refs))
	var sub []Ref
	var at []int
	for i := range refs {
		if ask[i] {
			sub = append(sub, refs[i])
			at = append(at, i)
		}
	}
	if len(sub) == 0 || rows == nil {
		return out, nil
	}
	ex, err := rows.Exists(ctx, sub)
	if err != nil {
		return nil, err
	}
	for k, i := range at {
		out[i] = ex[k]
	}
	return out, nil
}
