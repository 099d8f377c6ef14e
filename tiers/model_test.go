package tiers

import (
	"time"

	"github.com/quota-platform/quota/internal/testsupport/tiermodel"
)

// checkModels is tiermodel.CheckModels in the store's types: one Outcome
// per cell (Tier Hot) and whether the cost was counted.
func checkModels(now time.Time, cost int64, mode Mode, cells []tiermodel.Cell) ([]Outcome, bool) {
	outs, counted := tiermodel.CheckModels(now, cost, tiermodel.Mode(mode), cells)
	res := make([]Outcome, len(outs))
	for i, o := range outs {
		res[i] = outcome(o.Allowed, o.Remaining, o.Reset, o.Retry)
	}
	return res, counted
}
