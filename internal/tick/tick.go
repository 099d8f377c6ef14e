// Package tick runs a function on a period until its context ends: the
// background loops of quotad (repairs, folds, probes, polls).
package tick

import (
	"context"
	"time"
)

// Every calls fn every d until ctx ends, and not once after; a call that
// outlasts d delays the next (time.Ticker drops the ticks it missed).
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A tick and the end may both be ready: select picks either.
			if ctx.Err() != nil {
				return
			}
			fn()
		}
	}
}
