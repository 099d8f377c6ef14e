package migrate

import (
	"context"

	"github.com/quota-platform/quota/tiers"
)

// LockCells takes the move lease of each ref it can (tiers.CellLocker):
// while the router holds it, no move runs on the cell, so a cell the router
// found new cannot be placed, counted and moved to cold between its check
// that the cell is still new and its placement. A ref whose lease another
// holder has is not granted. unlock releases the leases granted.
func (m *Mover) LockCells(ctx context.Context, refs []tiers.Ref) ([]bool, func(), error) {
	l, err := m.lease(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	got := make(map[tiers.CellID]bool, len(l.refs))
	for i := range l.refs {
		got[l.refs[i].ID()] = true
	}
	held := make([]bool, len(refs))
	for i := range refs {
		held[i] = got[refs[i].ID()]
	}
	return held, l.release, nil
}

var _ tiers.CellLocker = (*Mover)(nil)
