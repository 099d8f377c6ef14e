package limiter

import (
	"encoding/binary"
	"time"

	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// FillDenialsForTest remembers n denials of distinct identities (one
// closed hourly fixed-window cell each, as the store answers them) at now
// and returns how many it offered.
func FillDenialsForTest(d *Denials, n int, now time.Time) int {
	gen := d.gen.Load()
	for i := range n {
		var id tiers.Identity
		binary.LittleEndian.PutUint64(id[:], uint64(i)*0x9E3779B97F4A7C15)
		binary.LittleEndian.PutUint64(id[8:], uint64(i))
		op := &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{{
			Algorithm: rules.FixedWindow, Limit: 10, Window: time.Hour, Identity: id,
		}}, Out: []tiers.Outcome{{Remaining: 0, ResetAfter: 30 * time.Minute, RetryAfter: 30 * time.Minute, Tier: tiers.Hot}}}
		d.remember(op, now, gen, false)
	}
	return n
}
