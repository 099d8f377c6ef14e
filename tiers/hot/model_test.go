package hot

import (
	"time"

	"github.com/quota-platform/quota/internal/testsupport/tiermodel"
	"github.com/quota-platform/quota/tiers"
)

// checkModels is tiermodel.CheckModels in the store's types: one Outcome
// per cell (Tier Hot) and whether the cost was counted.
func checkModels(now time.Time, cost int64, mode tiers.Mode, cells []tiermodel.Cell) ([]tiers.Outcome, bool) {
	outs, counted := tiermodel.CheckModels(now, cost, tiermodel.Mode(mode), cells)
	res := make([]tiers.Outcome, len(outs))
	for i, o := range outs {
		res[i] = outcome(o.Allowed, o.Remaining, o.Reset, o.Retry)
	}
	return res, counted
}
