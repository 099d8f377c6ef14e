package main

import (
	"fmt"
	"time"

	"github.com/quota-platform/quota/clock"
)

// decisionClock is the clock every decision reads its "now" from (the
// window a fixed-window call counts in, a bucket's refill, a sliding log's
// call times): this instance's wall clock, which is the time source of a
// decision (docs/operations.md, "Faults and guarantees").
//
// QUOTA_TEST_CLOCK_OFFSET (a Go duration, e.g. "1s" or "-500ms") moves it,
// for the fault tests that run instances whose clocks disagree; it is a
// wrapper chosen here, at wiring time, and nothing else knows of it. Unset
// or "0" is the wall clock itself.
func decisionClock(getenv func(string) string) (clock.Clock, error) {
	v := getenv("QUOTA_TEST_CLOCK_OFFSET")
	if v == "" {
		return clock.Real{}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, fmt.Errorf("QUOTA_TEST_CLOCK_OFFSET: %q is not a duration (e.g. 1s, -500ms)", v)
	}
	if d == 0 {
		return clock.Real{}, nil
	}
	return offsetClock(d), nil
}

// offsetClock is the wall clock moved by a fixed offset.
type offsetClock time.Duration

func (o offsetClock) Now() time.Time { return time.Now().Add(time.Duration(o)) }
