package hot

import "github.com/quota-platform/quota/internal/testsupport/tierstest"

// The cells of the tiers' tests (package tierstest).
type confCell = tierstest.Cell

var (
	confT0      = tierstest.T0
	newConfCell = tierstest.NewCell
	confOp      = tierstest.Op
)
