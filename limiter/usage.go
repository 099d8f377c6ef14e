package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/quota-platform/quota/rules"
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
	op, owners := buildOp(l.rules.Load(), req, now, l.loc, false)
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

// IdentityQuota is a calendar limit of app counted per identity: a rule
// with app_id and more dimensions, with the app's plan and overrides.
type IdentityQuota struct {
	Rule       string
	Dimensions []string          // the rule's, app_id among them
	Match      map[string]string // the rule's: a usage query of an identity needs them too
	Window     rules.Duration
	Limit      int64
	PeriodEnd  time.Time     // of the period now in force
	ResetAfter time.Duration // until PeriodEnd, by the limiter's clock
}

// IdentityQuotas are app's identity quotas (the identities whose crossings
// WithIdentityQuotaWatcher's watcher is told of), in the rules' order.
func (l *Limiter) IdentityQuotas(app string) []IdentityQuota {
	set := l.rules.Load()
	now := l.clock.Now()
	var out []IdentityQuota
	for i := range set.rules {
		cr := &set.rules[i]
		if want, ok := cr.rule.Match["app_id"]; ok && want != app {
			continue
		}
		limits := cr.limits
		if byRule, ok := set.apps[app]; ok && byRule[i] != nil {
			limits = byRule[i]
		}
		for _, lim := range limits {
			if cr.watched(lim) != identityQuota {
				continue
			}
			_, end := lim.Window.Period(now, l.loc)
			out = append(out, IdentityQuota{
				Rule: cr.rule.Name, Dimensions: cr.rule.Dimensions, Match: cr.rule.Match,
				Window: lim.Window, Limit: lim.Limit, PeriodEnd: end, ResetAfter: end.Sub(now),
			})
		}
	}
	return out
}
