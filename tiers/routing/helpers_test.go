package routing

import "github.com/quota-platform/quota/internal/testsupport/tierstest"

// The cells of the tiers' tests (package tierstest).
type confCell = tierstest.Cell

var (
	confT0      = tierstest.T0
	newConfCell = tierstest.NewCell
	confOp      = tierstest.Op
)

// boolInt is 1 for true, 0 for false (the scripts' flags).
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
