package warm

import (
	"time"

	"github.com/quota-platform/quota/internal/testsupport/tierstest"
)

// The cells of the tiers' tests (package tierstest).
var (
	confT0      = tierstest.T0
	newConfCell = tierstest.NewCell
	confOp      = tierstest.Op
)

// recT is tier_record_test.go's (package tiers): a second records can hold.
var recT = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).Unix()
