package analytics

import (
	"context"

	"github.com/quota-platform/quota/analytics/userdays"
)

// Test helpers of this package that the external tests (package
// analytics_test) use too.
var (
	EachUserEntry = userdays.EachEntry
)

// PeriodicFlush is one of Run's flushes, unpaced.
func PeriodicFlush(ctx context.Context, f *Flusher) error {
	return f.flush(ctx, false, nil, f.periodicHold())
}
