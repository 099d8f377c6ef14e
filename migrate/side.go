package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// side returns the tier side of a move (tiers.MoveSide) for a tier: Move
// runs every step through the source's and the destination's and never
// asks which tier is which.
func (m *Mover) side(t tiers.Tier) (tiers.MoveSide, error) {
	switch t {
	case tiers.Hot:
		return m.hotSide(), nil
	case tiers.Warm:
		return warm.Side{Dir: m.Warm, Rows: m.rows()}, nil
	case tiers.Cold:
		if m.Cold == nil {
			return nil, errors.New("migrate: no cold store")
		}
		return warm.ColdSide{Dir: m.Warm, Rows: m.Cold}, nil
	}
	return nil, fmt.Errorf("migrate: unknown tier %q", t)
}

// hotSide is the hot tier's side, which also reads where hot cells stand
// (StatesOf).
func (m *Mover) hotSide() hot.Side { return hot.Side{Mover: m.Hot, Rows: m.rows()} }

// rows is the cold tier's row lookup, nil without a cold store.
func (m *Mover) rows() tiers.ColdRows {
	if m.Cold == nil {
		return nil
	}
	return m.Cold
}

// TierOf returns the tier the directory names for each ref, "" while a move
// has it frozen.
func (m *Mover) TierOf(ctx context.Context, refs []tiers.Ref) ([]tiers.Tier, error) {
	return m.Warm.Tiers(ctx, refs, m.rows())
}
