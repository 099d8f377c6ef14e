package limiter

import (
	"context"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// Usage answers, for every limit of the rules that apply to dims (with the
// limits of the app's plan and overrides), how much is used, counting
// nothing: it is a dry run of a cost no limit allows, so no cell counts it
// and every cell reports what it holds (Entry.Remaining = limit - used).
// It does not use the denial shortcut of checks: it asks the store.
func (l *Limiter) Usage(ctx context.Context, dims []Dim) (Decision, error) {
	req := &Request{Dims: dims, DryRun: true, Cost: 1}
	now := l.clock.Now()
	op, owners := buildOp(l.rules.Load(), req, now, l.loc)
	if len(op.Cells) == 0 {
		return decision(op, owners), nil
	}
	var most int64
	for i := range op.Cells {
		most = max(most, op.Cells[i].Limit)
		// A shadow cell would let an all-shadow dry run "pass", which
		// reports remaining after the cost; nothing is counted either way.
		op.Cells[i].Shadow = false
	}
	op.Cost = most + 1
	if err := l.store.Check(ctx, now, []*tiers.Op{op}); err != nil {
		return Decision{}, fmt.Errorf("usage: %w", err)
	}
	d := decision(op, owners)
	for i := range d.Entries {
		d.Entries[i].Allowed = d.Entries[i].Remaining > 0
		d.Entries[i].RetryAfter = 0
	}
	return d, nil
}
